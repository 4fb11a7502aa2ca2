"""gpsl as a model service (``python -m gpsl serve``, docs/serve.md): a Label Studio ML
backend (:mod:`gpsl.serve.labelstudio`) and a tagging API (:mod:`gpsl.serve.tagging`) over
one loaded model (:mod:`gpsl.serve.service`), its votes and refits kept in SQLite
(:mod:`gpsl.serve.state`), served by Starlette on uvicorn (:mod:`gpsl.serve.app`)."""

from gpsl.serve.app import create_app
from gpsl.serve.service import Limits, Service, Settings

__all__ = ["Limits", "Service", "Settings", "create_app"]
