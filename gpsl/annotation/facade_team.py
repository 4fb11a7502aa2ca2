"""The facade's methods for the team (part of :class:`gpsl.annotation.Store`, which
inherits them): the door (acting stores, accounts, sign-in sessions and links, project
memberships: :mod:`.access`, :mod:`.accounts`, :mod:`.auth`) and the team's settings, crowd
model and figures (:mod:`.team`, :mod:`.team_columns`). Like the rest of the facade, each
method delegates to one module, with the store's database ``self.db``."""

from __future__ import annotations

from gpsl.annotation import access
from gpsl.annotation.labeling import team, team_columns
from gpsl.annotation.people import accounts, auth
from gpsl.annotation.permissions import Role, Shows, door_only, requires
from gpsl.annotation.store import validate
from gpsl.annotation.store.records import TrainingLabels


class TeamFacade:
    """The team's methods of :class:`~gpsl.annotation.Store` (a mixin: ``self.db`` is the
    store's :class:`~gpsl.annotation.store.db.Database`)."""

    # the door (gpsl.annotation.access, accounts, auth)
    @door_only
    def acting(self, who) -> access.ActingStore:
        """This store as ``who`` (an :class:`~gpsl.annotation.Identity`) may use it: roles,
        project membership and names checked on every call (:mod:`gpsl.annotation.access`)."""
        return access.ActingStore(self, who)

    @door_only
    def as_session(self, token: str | None) -> access.ActingStore | None:
        """:meth:`acting` for the account of a session token (None: no valid session)."""
        who = self.session_identity(token)
        return None if who is None else self.acting(who)

    @requires(Role.LEAD)
    def account_count(self) -> int:
        return accounts.count(self.db)

    @requires(Role.LEAD)
    def list_accounts(self) -> list[dict]:
        return accounts.list_all(self.db)

    @requires(Role.LEAD)
    def create_account(self, name: str, role: str = "annotator",
                       password: str | None = None) -> int:
        return accounts.create(self.db, name, role, password)

    @requires(Role.LEAD)
    def set_account_password(self, account_id: int, password: str | None) -> None:
        accounts.set_password(self.db, account_id, password)

    @requires(Role.LEAD)
    def set_account_role(self, account_id: int, role: str) -> None:
        accounts.set_role(self.db, account_id, role)

    @requires(Role.LEAD)
    def delete_account(self, account_id: int) -> None:
        accounts.delete(self.db, account_id)

    @requires(Role.LEAD)
    def members(self, project_id: int) -> list[dict]:
        return accounts.members(self.db, project_id)

    @requires(Role.LEAD)
    def set_member(self, project_id: int, account_id: int, member: bool = True) -> bool:
        return accounts.set_member(self.db, project_id, account_id, member)

    @door_only
    def verify_password(self, name: str, password: str):
        """The identity for a right password, else None (no rate limit: :meth:`sign_in`)."""
        return accounts.check_password_of(self.db, name, password)

    @door_only
    def sign_in(self, name: str, password: str, client: str | None = None):
        """``(identity, session token)``, None for a wrong name or password; rate limited
        per name and per ``client`` (:func:`gpsl.annotation.people.auth.sign_in`)."""
        return auth.sign_in(self.db, name, password, client)

    @requires(Role.LEAD)
    def issue_sign_in_link(self, account_id: int, hours: float = auth.LINK_HOURS) -> str:
        return auth.issue_link(self.db, account_id, hours)

    @door_only
    def redeem_sign_in_link(self, token: str):
        return auth.redeem_link(self.db, token)

    @door_only
    def start_session(self, account_id: int) -> str:
        return auth.start_session(self.db, account_id)

    @door_only
    def session_identity(self, token: str | None):
        return auth.session_identity(self.db, token)

    @door_only
    def end_session(self, token: str | None) -> None:
        auth.end_session(self.db, token)

    @requires(Role.LEAD)
    def end_sessions(self, account_id: int) -> int:
        return auth.end_sessions(self.db, account_id)

    @door_only
    def issue_setup_token(self, hours: float = auth.SETUP_HOURS) -> str | None:
        return auth.issue_setup_token(self.db, hours)

    @door_only
    def setup_lead(self, token: str, name: str, password: str, client: str | None = None):
        return auth.setup_lead(self.db, token, name, password, client)

    # team (gpsl.annotation.labeling.team)
    @requires(Role.ANNOTATOR, shows=Shows.NO_CROWD)
    def team_settings(self, project_id: int) -> dict:
        project = self.get_project(project_id)
        return team.settings_of(project or {})

    @requires(Role.LEAD)
    def training_labels(self, project_id: int) -> TrainingLabels:
        return team.training_labels(self.get_project(project_id) or {})

    @requires(Role.LEAD)
    def set_team_settings(self, project_id: int, **settings) -> dict:
        return team.set_settings(self.db, project_id, **settings)

    @requires(Role.LEAD)
    def fit_crowd_model(self, project_id: int, **kw) -> dict:
        return team.fit_crowd(self.db, project_id, **kw)

    @requires(Role.LEAD)
    def training_set(self, project_id: int) -> dict:
        """What a training run fits by the project's rule (:func:`team.training_set`)."""
        return team.training_set(self.db, project_id)

    @requires(Role.LEAD)
    def team_votes(self, project_id: int) -> list[dict]:
        return team.project_votes(self.db, project_id)

    @requires(Role.LEAD)
    def agreement(self, project_id: int, votes=None) -> dict:
        return team.agreement_figures(self.db, project_id, votes)

    @requires(Role.LEAD)
    def annotator_stats(self, project_id: int, votes=None, figures=None) -> list[dict]:
        return team.annotator_stats(self.db, project_id, votes, figures)

    @requires(Role.LEAD)
    def conflicts(self, project_id: int, votes=None) -> list[dict]:
        return team.conflicts(self.db, project_id, votes)

    @requires(Role.LEAD)
    def team_figures(self, project_id: int, make=None):
        """``agreement, people, conflicts`` from vote columns (or ``make`` of them), kept
        until a vote changes (:func:`team_columns.figures`); None: nobody has voted."""
        return team_columns.figures(self.db, project_id, team.MAX_MATRIX, make)


TeamFacade = validate.typed_ids(TeamFacade)
