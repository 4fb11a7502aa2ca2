"""gpsl serve: the Label Studio ML backend protocol (golden payloads), BIO <-> character
offsets, the tagging API, bad requests, the token guard, limits, webhooks -> votes -> refit,
and one real uvicorn server on a loopback port."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from gpsl.serve import Limits, Service, Settings, create_app
from gpsl.serve import labelstudio as ls
from gpsl.serve.state import State
from tests.support.helpers import free_port, wait_until
from tests.support.limits import limit
from tests.support.serve import CONFIG, answers, train_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serve"
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Token {TOKEN}"}


def golden(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_model(tmp_path_factory.mktemp("serve-model"))


def make_client(trained, tmp_path, **kw) -> TestClient:
    model, data = trained
    service = Service(Settings(model_dir=str(model), state_dir=str(tmp_path / "state"), **kw))
    return TestClient(create_app(service, TOKEN))


@pytest.fixture
def client(trained, tmp_path):
    return make_client(trained, tmp_path)


def one_line_error(response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and "\n" not in body["error"] and body["error"]
    assert "Traceback" not in response.text
    return body["error"]


# ------------------------------------------------------------------ BIO <-> offsets


def test_tokenize_offsets_index_unicode_text_and_whitespace_runs():
    text = "  Zoë\u00a0Müller\t\tflew to  São Paulo —\u3000東京 .\n"
    offsets = ls.tokenize(text)
    words = [text[a:b] for a, b in offsets]
    assert words == ["Zoë", "Müller", "flew", "to", "São", "Paulo", "—", "東京", "."]
    labels = ["B-Person", "I-Person", "O", "O", "B-Location", "I-Location", "O", "B-Location",
              "O"]
    P = np.full((len(words), 2), 0.5)
    spans = ls.labels_to_spans(offsets, labels, None)
    assert [(text[a:b], k) for a, b, k, _ in spans] == [
        ("Zoë\u00a0Müller", "Person"), ("São Paulo", "Location"), ("東京", "Location")]
    # and back: each span's tokens get B-/I-, the rest unlabeled (or O when complete)
    chars = [(a, b, k) for a, b, k, _ in spans]
    assert ls.spans_to_votes(offsets, chars, complete=True) == labels
    assert ls.spans_to_votes(offsets, chars, complete=False) == [
        lab if lab != "O" else None for lab in labels]
    assert P.shape[0] == len(offsets)


def test_span_probability_is_the_smallest_marginal_of_its_labels():
    offsets = [(0, 3), (4, 8), (9, 11)]
    classes = ["B-X", "I-X", "O"]
    P = np.array([[0.9, 0.05, 0.05], [0.1, 0.7, 0.2], [0.1, 0.1, 0.8]])
    (span,) = ls.labels_to_spans(offsets, ["B-X", "I-X", "O"], P, classes)
    assert span == (0, 8, "X", pytest.approx(0.7))


def test_spans_off_token_boundaries_and_overlaps_become_votes():
    text = "New York City"
    offsets = ls.tokenize(text)
    # a span ending inside a word takes the whole word; two types on one token: unlabeled
    assert ls.spans_to_votes(offsets, [(0, 6, "Location")], False) == [
        "B-Location", "I-Location", None]
    assert ls.spans_to_votes(offsets, [(0, 8, "Location"), (4, 13, "Org")], True) == [
        "B-Location", None, "I-Org"]


# ------------------------------------------------------------------ the labeling config


def test_setup_reads_labels_and_refuses_other_configs():
    cfg = ls.parse_config(golden("setup_request.json")["schema"])
    assert cfg == ls.LabelConfig("ner", "text", "text", ("Person", "Location", "Time"))
    bad = {
        "<View><Image name='i' value='$img'/><Choices name='c' toName='i'>"
        "<Choice value='a'/></Choices></View>": "Choices",
        "<View><Text name='t' value='$text'/></View>": "needs a <Labels>",
        "<View><Image name='i' value='$img'/><Labels name='l' toName='i'>"
        "<Label value='A'/></Labels></View>": "not a <Text>",
        "<View><Text name='t'": "not valid XML",
        '<?xml version="1.0"?><!DOCTYPE v [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        "<View>&x;</View>": "no DTD",
    }
    for xml, why in bad.items():
        with pytest.raises(ls.ProtocolError, match=why):
            ls.parse_config(xml)


# ------------------------------------------------------------------ the protocol's payloads


def test_setup_and_health_answer_the_protocols_payloads(client):
    r = client.post("/setup", json=golden("setup_request.json"), headers=AUTH)
    assert r.status_code == 200
    assert r.json()["model_version"].startswith("gpsl-")
    assert client.get("/health").json()["status"] == "UP"  # no token needed
    r = client.post("/setup", json={"project": "1.2", "schema": "<View><Text name='t' "
                                    "value='$t'/></View>"}, headers=AUTH)
    assert "Labels" in one_line_error(r, 400)


def _shape(value):
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__ if not isinstance(value, (int, float)) else "number"


def test_predict_answers_in_the_shape_of_the_protocols_example(client):
    request = golden("predict_request.json")
    text = request["tasks"][0]["data"]["text"]
    r = client.post("/predict", json=request, headers=AUTH)
    assert r.status_code == 200
    got, want = r.json(), golden("predict_response.json")
    (pred,) = got["results"]
    # the example's keys at every level (gpsl adds value.text, as Label Studio shows it)
    region = dict(pred["result"][0])
    region["value"] = {k: v for k, v in region["value"].items() if k != "text"}
    assert _shape({**pred, "result": [region]}) == _shape(want["results"][0])
    spans = {(text[g["value"]["start"]:g["value"]["end"]], g["value"]["labels"][0])
             for g in pred["result"]}
    assert {("Obama", "Person"), ("New York", "Location")} <= spans
    for g in pred["result"]:
        v = g["value"]
        assert v["text"] == text[v["start"]:v["end"]] and 0 < g["score"] <= 1
    assert pred["model_version"] == client.get("/v1/model", headers=AUTH).json()[
        "model_version"]


def test_task_score_is_the_queues_bald_score_so_the_doubtful_task_sorts_first(client):
    tasks = [{"id": 1, "data": {"text": "President Obama is speaking at noon in Paris ."}},
             {"id": 2, "data": {"text": "Zxq wobbled qqq vrr at Plimsk frobnitz ."}}]
    r = client.post("/predict", json={"tasks": tasks, "label_config": CONFIG}, headers=AUTH)
    scores = [p["score"] for p in r.json()["results"]]
    assert scores[1] > scores[0] > 0  # the unfamiliar sentence is asked first (descending)
    q = client.post("/v1/query", json={"texts": [t["data"]["text"] for t in tasks]},
                    headers=AUTH).json()
    assert [s["sentence"] for s in q["sentences"]] == [1, 0]
    J = len(client.get("/v1/model", headers=AUTH).json()["labels"])
    assert [s["score"] / np.log(J) for s in q["sentences"]] == pytest.approx(scores[::-1],
                                                                            abs=1e-5)
    assert all(0 < s <= 1 for s in scores)


# ------------------------------------------------------------------ the tagging API


def test_tag_returns_the_labels_and_marginals_of_gpsl_test(client, trained, tmp_path):
    from gpsl.cli import main

    words = ["Merkel", "flew", "to", "Oslo", "on", "Monday", "morning", "."]
    r = client.post("/v1/tag", json={"sentences": [words], "marginals": True}, headers=AUTH)
    body = r.json()
    (s,) = body["sentences"]
    assert s["tokens"] == words and len(s["marginals"]) == len(words)
    assert np.allclose(np.sum(s["marginals"], axis=1), 1.0, atol=1e-5)
    src = tmp_path / "in.conll"
    src.write_text("\n".join(words) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["test", "-m", str(trained[0]), "--marginals", str(src), "-o", str(out)]) == 0
    cli = [line.split("\t")[-1].split("/") for line in out.read_text().split("\n") if line]
    assert [lab for lab, _ in cli] == s["labels"]
    assert [float(p) for _, p in cli] == pytest.approx(s["p"], abs=2e-6)
    t = client.post("/v1/tag", json={"texts": ["Merkel  flew to Oslo ."]}, headers=AUTH).json()
    assert t["sentences"][0]["spans"][0]["start"] == 0
    assert t["sentences"][0]["offsets"][1] == [8, 12]


def test_model_reports_version_labels_calibration_and_training_data(client):
    info = client.get("/v1/model", headers=AUTH).json()
    assert set(info["types"]) == {"Person", "Location", "Time"}
    assert info["calibration"]["calibrated"] and info["calibration"]["folds"] == 2
    assert info["training_data"]["sentences"] == 60
    assert sum(info["training_data"]["label_counts"].values()) == info["training_data"][
        "tokens"]


# ------------------------------------------------------------------ the guard and the limits


def test_token_guard_on_every_endpoint_but_health(client):
    basic = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
    wrong = base64.b64encode(b"anyone:nope").decode()
    for method, path in [("post", "/predict"), ("post", "/setup"), ("post", "/webhook"),
                         ("post", "/v1/tag"), ("post", "/v1/query"), ("get", "/v1/model"),
                         ("get", "/metrics")]:
        for headers in ({}, {"Authorization": "Token nope"}, {"Authorization": f"Basic {wrong}"},
                        {"Authorization": "Basic !!!"}, {"Authorization": TOKEN}):
            r = getattr(client, method)(path, headers=headers)
            assert "token" in one_line_error(r, 401)
    assert client.get("/v1/model", headers={"Authorization": f"Basic {basic}"}).status_code == 200
    assert client.get("/v1/model", headers={"Authorization": f"Bearer {TOKEN}"}).status_code \
        == 200
    assert client.get("/health").status_code == 200 and client.get("/").status_code == 200


def test_bad_requests_get_one_line_4xx(client):
    cases = [
        (b"{", "application/json", 400, "not valid JSON"),
        (b"[1]", "application/json", 400, "JSON object"),
        (b'{"tasks": 3}', "application/json", 400, "tasks"),
        (b"tasks=1", "application/x-www-form-urlencoded", 415, "JSON"),
        (b'{"a": NaN}', "application/json", 400, "not valid JSON"),
        (b"[" * 100000 + b"]" * 100000, "application/json", 400, "not valid JSON"),
    ]
    for body, ctype, status, words in cases:
        r = client.post("/predict", content=body, headers={**AUTH, "Content-Type": ctype})
        assert words in one_line_error(r, status)
    r = client.post("/predict", json={"tasks": [{"id": 1, "data": {}}], "label_config": CONFIG},
                    headers=AUTH)
    assert "data.text" in one_line_error(r, 400)
    r = client.post("/predict", json={"tasks": [{"id": 1, "data": {"text": "a"}}]}, headers=AUTH)
    assert "label_config" in one_line_error(r, 400)
    r = client.post("/v1/tag", json={"sentences": [["a b"]]}, headers=AUTH)
    assert "without spaces" in one_line_error(r, 400)
    r = client.post("/v1/tag", json={"sentences": [[["Obama", "NNP"]]]}, headers=AUTH)
    assert "reads 1" in one_line_error(r, 422)
    r = client.post("/v1/query", json={"texts": ["a"], "strategy": "psychic"}, headers=AUTH)
    assert "unknown strategy" in one_line_error(r, 400)
    assert "no such endpoint" in one_line_error(client.get("/nope", headers=AUTH), 404)
    assert "not allowed" in one_line_error(client.get("/predict", headers=AUTH), 405)
    r = client.post("/webhook", json={"action": "ANNOTATION_CREATED", "project": {"id": 1},
                                      "task": {"id": 1, "data": {"text": "Bob"}},
                                      "annotation": {"id": 1, "completed_by": 1,
                                                     "result": [{"type": "labels", "value": {
                                                         "start": 0, "end": 99,
                                                         "labels": ["Person"]}}]}},
                    headers=AUTH)
    assert "no /setup" in one_line_error(r, 400)


def test_requests_over_the_limits_get_413(trained, tmp_path):
    c = make_client(trained, tmp_path, limits=Limits(max_body=2000, max_tasks=3, max_tokens=10,
                                                     max_total_tokens=25, max_chars=200))
    task = {"data": {"text": "Bob flew to Paris ."}}
    r = c.post("/predict", json={"tasks": [task] * 4, "label_config": CONFIG}, headers=AUTH)
    assert "4 tasks" in one_line_error(r, 413)
    long = {"data": {"text": " ".join(["word"] * 11)}}
    r = c.post("/predict", json={"tasks": [long], "label_config": CONFIG}, headers=AUTH)
    assert "11 tokens" in one_line_error(r, 413)
    r = c.post("/v1/tag", json={"sentences": [["w"] * 9] * 3}, headers=AUTH)
    assert "27 tokens" in one_line_error(r, 413)
    r = c.post("/v1/tag", json={"texts": ["x" * 300]}, headers=AUTH)
    assert "300 characters" in one_line_error(r, 413)
    r = c.post("/v1/tag", content=b'{"texts": ["' + b"a " * 2000 + b'"]}',
               headers={**AUTH, "Content-Type": "application/json"})
    assert "bytes" in one_line_error(r, 413)
    slow = make_client(trained, tmp_path / "slow", limits=Limits(timeout=1e-4))
    r = slow.post("/v1/tag", json={"sentences": [["Bob"] * 50] * 20}, headers=AUTH)
    assert "longer than" in one_line_error(r, 503)


# ------------------------------------------------------------------ webhooks, votes, refits


def _annotation(text: str, ann_id: int, task_id: int, user: int, spans) -> dict:
    result = [{"from_name": "ner", "to_name": "text", "type": "labels",
               "value": {"start": text.index(w), "end": text.index(w) + len(w),
                         "text": w, "labels": [k]}} for w, k in spans]
    return {"action": "ANNOTATION_CREATED", "project": {"id": 3, "label_config": CONFIG},
            "task": {"id": task_id, "data": {"text": text}},
            "annotation": {"id": ann_id, "task": task_id, "completed_by": user,
                           "result": result}}


def test_webhook_votes_are_kept_per_annotator_and_deleted_with_the_annotation(client, tmp_path):
    r = client.post("/webhook", json=golden("webhook_annotation_created.json"), headers=AUTH)
    assert r.status_code == 201 and r.json()["status"] == "ok"
    state = State(tmp_path / "state")
    (task,) = state.training_tasks()
    assert task[0] == 7
    labels = task[2]["ls-user-1"]
    words = task[1]
    assert dict(zip(words, labels, strict=True))["Obama"] == "B-Person"
    assert labels[words.index("New")] == "B-Location" and labels[words.index("is")] is None
    r = client.post("/webhook", json=golden("webhook_annotations_deleted.json"), headers=AUTH)
    assert r.json()["result"]["deleted"] == 1 and state.training_tasks() == []
    r = client.post("/webhook", json={"action": "PROJECT_UPDATED"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "Unknown event"


def test_two_annotators_votes_refit_in_the_background_and_predictions_change(trained,
                                                                              tmp_path):
    model, data = trained
    c = make_client(trained, tmp_path, refit_every=3, train_data=str(data))
    service = c.app.state.service
    probe = {"tasks": [{"id": 99, "data": {"text": "Bob ate pizza in Oslo ."}}],
             "label_config": CONFIG}
    before = c.post("/predict", json=probe, headers=AUTH).json()["results"][0]
    assert all(g["value"]["labels"] != ["Food"] for g in before["result"])
    texts = ["Alice Smith ate pizza in Rome .", "Eve ate sushi at noon .",
             "Frank ate pasta in Berlin ."]
    statuses = []
    for k, text in enumerate(texts):
        w = text.split()
        for user in (1, 2):
            r = c.post("/webhook", json=_annotation(text, 10 * k + user, k + 1, user,
                                                     [(w[-4] if k != 1 else w[2], "Food"),
                                                      (w[0], "Person")]), headers=AUTH)
            statuses.append(r.json()["result"]["refit"])
    # the third vote starts a refit; the next three, counted meanwhile, start another
    assert statuses[:3] == ["waiting", "waiting", "started"]
    assert service.wait_refits(limit(300))
    info = c.get("/v1/model", headers=AUTH).json()
    assert info["refit_error"] is None
    assert info["votes"] == {"votes": 6, "tasks": 3, "annotators": 2, "new_votes": 0}
    assert info["model_version"] == info["refits"][-1]["version"] != info["base_version"]
    assert info["refits"][-1]["votes"] == 6 and "Food" in info["types"]
    after = c.post("/predict", json=probe, headers=AUTH).json()["results"][0]
    assert after["model_version"] == info["model_version"]
    assert ("pizza", "Food") in {(g["value"]["text"], g["value"]["labels"][0])
                                 for g in after["result"]}
    # START_TRAINING refits at once; a new worker on the same state loads the refit
    r = c.post("/webhook", json=golden("webhook_start_training.json"), headers=AUTH)
    assert r.json()["result"]["refit"] == "started"
    assert service.wait_refits(limit(300))
    other = Service(Settings(model_dir=str(model), state_dir=str(tmp_path / "state")))
    assert other.version == service.version == State(tmp_path / "state").current_model()[0]


# ------------------------------------------------------------------ a real server


@pytest.mark.timeout(240)
def test_a_real_uvicorn_server_with_two_workers(trained, tmp_path):
    port = free_port()
    env = {**os.environ, "GPSL_SERVE_TOKEN": TOKEN}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpsl", "serve", "-m", str(trained[0]), "--port", str(port),
         "--workers", "2", "--state-dir", str(tmp_path / "state")],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(base), limit(90), what="gpsl serve to answer /health")
        req = urllib.request.Request(
            base + "/predict", data=json.dumps(golden("predict_request.json")).encode(),
            headers={**AUTH, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=limit(30)) as r:
            assert json.loads(r.read())["results"][0]["result"]
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/v1/model", timeout=limit(30))
        assert err.value.code == 401 and "error" in json.loads(err.value.read())
    finally:
        proc.terminate()
        proc.wait(timeout=limit(30))
        log.close()
    lines = (tmp_path / "serve.log").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert {(r.get("path"), r.get("status")) for r in records} >= {("/predict", 200),
                                                                   ("/v1/model", 401)}
    assert not any("Traceback" in line for line in lines)


@pytest.mark.parametrize("decoder", ["rns", "exact"])
def test_one_pass_prediction_equals_the_models_three(trained, decoder):
    from gpsl.annotation.training.pipeline import query_scores
    from gpsl.model import GPSL
    from gpsl.serve.service import _predict

    model = GPSL.load(trained[0])
    model.decoder = decoder
    X = [[(w,) for w in "Eve flew to Rome at noon .".split()],
         [(w,) for w in "Zxq met Plimsk".split()]]
    labels, P, q = _predict(model, X, scores=True)
    assert labels == [list(v) for v in model.predict(X)]
    want = model.predict_marginals(X)
    assert all(np.allclose(a, b) for a, b in zip(P, want, strict=True))
    assert all(np.allclose(a, b) for a, b in zip(
        q, query_scores(model, X, None, want, "bald"), strict=True))


def test_the_command_refuses_bad_options_in_one_line(trained, tmp_path, monkeypatch, capsys):
    from gpsl.cli import main

    monkeypatch.delenv("GPSL_SERVE_TOKEN", raising=False)
    model = str(trained[0])
    cases = [([], "a token is required"),
             (["--token", "t", "--port", "70000"], "not a TCP port"),
             (["--token", "t", "--train-data", str(FIXTURES / "README.md")], "README.md:"),
             (["--token", "t", "--workers", "0"], "positive number")]
    for extra, words in cases:
        assert main(["serve", "-m", model, "--state-dir", str(tmp_path / "s"), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert main(["serve", "-m", str(tmp_path), "--token", "t"]) == 2
    assert "not a gpsl model directory" in capsys.readouterr().err


def test_a_refused_request_is_logged_as_a_warning(trained, tmp_path, caplog, monkeypatch):
    """Issue 41: the service logs warnings (what it refused, and why) and errors."""
    import logging

    # configure_logging (the command's) stops propagation; caplog listens at the root
    monkeypatch.setattr(logging.getLogger("gpsl.serve"), "propagate", True)
    client = make_client(trained, tmp_path)
    with caplog.at_level(logging.WARNING, logger="gpsl.serve"):
        bad = client.post("/predict", content=b"{not json",
                          headers={**AUTH, "Content-Type": "application/json"})
        anonymous = client.post("/predict", json={})
        assert client.get("/health").status_code == 200  # an answer: nothing logged
    assert bad.status_code == 400 and anonymous.status_code == 401
    refused = [r for r in caplog.records if r.name == "gpsl.serve"]
    assert [(r.levelno, r.status, r.path) for r in refused] == [
        (logging.WARNING, 400, "/predict"), (logging.WARNING, 401, "/predict")], caplog.text
    assert "not valid JSON" in refused[0].error
