"""Drives a running Label Studio through label-studio-sdk (run with Label Studio's own
virtual environment's Python by tests/cli/test_serve_labelstudio.py; not a test module).

    python labelstudio_driver.py SETTINGS_JSON

SETTINGS_JSON: ``{"ls_url", "ls_token", "gpsl_url", "gpsl_token", "config", "texts",
"annotations": [[task index, user index, [[word, type], ...]], ...], "probe": text,
"wait_seconds"}``. Prints one JSON object: what Label Studio holds and shows at each step.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request

from label_studio_sdk import LabelStudio


def predictions_of(ls, project: int) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for p in ls.predictions.list(project=project):
        out.setdefault(p.task, []).append({"model_version": p.model_version, "score": p.score,
                                           "result": p.result})
    return out


def retrieve(ls, project: int) -> None:
    """The Data Manager's "Retrieve Predictions" on every task (Community's way: the ML
    backend's predict-all endpoint is not in it)."""
    ls.actions.create(id="retrieve_tasks_predictions", project=project,
                      selected_items={"all": True, "excluded": []})


def wait_for(what: str, fn, seconds: float):
    end = time.monotonic() + seconds
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(1.0)


def main() -> None:
    cfg = json.loads(open(sys.argv[1], encoding="utf-8").read())
    wait = float(cfg.get("wait_seconds", 120))
    ls = LabelStudio(base_url=cfg["ls_url"], api_key=cfg["ls_token"])
    out: dict = {"lead": ls.users.whoami().id}
    project = ls.projects.create(title="gpsl NER", label_config=cfg["config"])
    out["project"] = project.id
    # the ML backend: Basic auth with the token as the password (what Label Studio sends)
    ml = ls.ml.create(project=project.id, url=cfg["gpsl_url"], title="gpsl",
                      auth_method="BASIC_AUTH", basic_auth_user="label-studio",
                      basic_auth_pass=cfg["gpsl_token"], is_interactive=False,
                      auto_update=True)
    out["ml_backend"] = {"id": ml.id, "state": ml.state, "model_version": ml.model_version}
    # Label Studio creates the backend's /webhook hook without auth: give it the token
    hooks = [w for w in ls.webhooks.list(project=project.id) if w.url.endswith("/webhook")]
    for w in hooks:
        ls.webhooks.update(id=w.id, url=w.url,
                           headers={"Authorization": f"Token {cfg['gpsl_token']}"})
    out["webhooks"] = [w.url for w in hooks]
    ls.projects.import_tasks(id=project.id, request=[{"text": t} for t in cfg["texts"]])
    tasks = sorted(ls.tasks.list(project=project.id), key=lambda t: t.id)
    ids = [t.id for t in tasks]
    out["tasks"] = ids
    retrieve(ls, project.id)
    first = wait_for("predictions", lambda: (p := predictions_of(ls, project.id))
                     and len(p) == len(ids) and p, wait)
    out["predictions_before"] = {str(k): v for k, v in first.items()}
    # a second annotator
    known = [u.id for u in ls.users.list() if u.email == "a2@example.com"]
    users = [out["lead"], known[0] if known else ls.users.create(
        username="annotator2", email="a2@example.com", password="another-pass-456").id]
    out["users"] = users
    for k, u, spans in cfg["annotations"]:
        text = cfg["texts"][k]
        result = []
        for word, kind in spans:
            a = text.index(word)
            result.append({"from_name": "ner", "to_name": "text", "type": "labels",
                           "value": {"start": a, "end": a + len(word), "text": word,
                                     "labels": [kind]}})
        ls.annotations.create(id=ids[k], result=result, completed_by=users[u],
                              project=project.id)
    out["annotations"] = sum(len(ls.annotations.list(id=i)) for i in ids)
    ls.ml.train(id=ml.id)  # START_TRAINING through the backend's webhook
    out["trained"] = True
    base = first[ids[0]][0]["model_version"]

    def gpsl_version():
        req = urllib.request.Request(cfg["gpsl_url"].rstrip("/") + "/v1/model", headers={
            "Authorization": f"Token {cfg['gpsl_token']}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            info = json.loads(r.read())
        return info["model_version"] if info["model_version"] != base else None

    out["refit_version"] = wait_for("gpsl's refit", gpsl_version, wait)
    # a new task, predicted by the refitted model
    probe = ls.tasks.create(project=project.id, data={"text": cfg["probe"]})
    retrieve(ls, project.id)
    out["probe"] = probe.id
    out["probe_after"] = wait_for("the new task's prediction",
                                  lambda: predictions_of(ls, project.id).get(probe.id), wait)
    # every task predicted by the refit (Retrieve Predictions asks for all of them)
    wait_for("the refit's predictions of every task", lambda: all(
        any(x["model_version"] == out["refit_version"] for x in v)
        for v in predictions_of(ls, project.id).values()), wait)
    # the Data Manager's score column averages the predictions of the project's model
    # version (Settings > Predictions; Label Studio sets it to the backend's title, which no
    # prediction carries): choose the refit's version, as a user does there
    ls.projects.update(id=project.id, model_version=out["refit_version"])
    # a Data Manager tab ordered by gpsl's score, most doubtful first (the queue's order)
    hidden = [f"tasks:{c}" for c in (
        "inner_id", "completed_at", "cancelled_annotations", "annotations_results",
        "annotations_ids", "predictions_results", "file_upload", "storage_filename",
        "created_at", "updated_at", "updated_by", "avg_lead_time", "draft_exists")]
    view = ls.views.create(project=project.id, data={
        "title": "gpsl queue", "ordering": ["-tasks:predictions_score"],
        "hiddenColumns": {"explore": hidden, "labeling": hidden}})
    out["view"] = view.id
    out["queue"] = [t.id for t in ls.tasks.list(project=project.id, view=view.id)]
    out["predictions_after"] = {str(k): v for k, v in predictions_of(ls, project.id).items()}
    out["project_id"] = project.id
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
