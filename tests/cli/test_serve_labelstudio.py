"""gpsl serve as the ML backend of a real Label Studio (pip, its own virtual environment, on
loopback, SQLite in a throwaway data directory), driven through label-studio-sdk: a NER
project, gpsl connected with Basic auth, tasks imported, predictions fetched (spans and
scores checked), annotations from two users, a refit, predictions of the refitted model.

Skipped with the reason only when Label Studio cannot be installed (no network to PyPI, no
venv); under CI=true that is a failure. Chromium screenshots of Label Studio showing gpsl's
predictions go to the test's directory, and to ``$GPSL_SCREENSHOTS_DIR`` when it is set
(docs/screenshots/ is refreshed that way, by hand: no test writes into the checkout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from gpsl.serve import Service, Settings
from gpsl.serve.labelstudio import tokenize
from tests.support.helpers import free_port, wait_until
from tests.support.labelstudio import PASSWORD, TOKEN, USER, InstallError, ensure_installed, running
from tests.support.limits import limit
from tests.support.serve import CONFIG, answers, train_model

CHROMIUM = Path("/usr/bin/chromium")
GPSL_TOKEN = "gpsl-serve-token-ls"
TEXTS = ["President Obama is speaking at noon in Paris .",
         "Alice Smith ate pizza in Rome .",
         "Eve ate sushi at noon in Oslo .",
         "Zxq wobbled qqq at Plimsk ."]
# [task, user (0: the lead, 1: the second annotator), spans]: two votes on each of two tasks
ANNOTATIONS = [
    [1, 0, [["Alice Smith", "Person"], ["pizza", "Food"], ["Rome", "Location"]]],
    [1, 1, [["Alice Smith", "Person"], ["pizza", "Food"]]],
    [2, 0, [["Eve", "Person"], ["sushi", "Food"]]],
    [2, 1, [["Eve", "Person"], ["sushi", "Food"], ["Oslo", "Location"]]],
]
PROBE = "Bob ate pizza in Berlin ."


@pytest.fixture(scope="module")
def ls_python():
    try:
        return ensure_installed()
    except InstallError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Label Studio could not be installed: {exc}")
        pytest.skip(f"Label Studio could not be installed: {exc}")


def spans_of(prediction: dict, text: str) -> set[tuple[str, str]]:
    out = set()
    for region in prediction["result"]:
        v = region["value"]
        assert v["text"] == text[v["start"]:v["end"]]
        assert 0 < region["score"] <= 1
        out.add((v["text"], v["labels"][0]))
    return out


def gpsl_model(url: str) -> dict:
    req = urllib.request.Request(url + "/v1/model",
                                 headers={"Authorization": f"Token {GPSL_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.timeout(1500)
def test_label_studio_uses_gpsl_as_its_ml_backend(ls_python, tmp_path):
    model, data = train_model(tmp_path)
    gport, lport = free_port(), free_port()
    gurl = f"http://127.0.0.1:{gport}"
    glog = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "gpsl", "serve", "-m", str(model), "--port", str(gport),
         "--state-dir", str(tmp_path / "state"), "--train-data", str(data),
         "--refit-every", "4"],
        stdout=glog, stderr=subprocess.STDOUT, env={**os.environ, "GPSL_SERVE_TOKEN": GPSL_TOKEN})
    try:
        wait_until(lambda: answers(gurl), limit(90), what="gpsl serve")
        base = gpsl_model(gurl)["model_version"]
        with running(tmp_path / "ls-data", lport, startup=limit(600)) as lurl:
            settings = tmp_path / "driver.json"
            settings.write_text(json.dumps({
                "ls_url": lurl, "ls_token": TOKEN, "gpsl_url": gurl,
                "gpsl_token": GPSL_TOKEN, "config": CONFIG, "texts": TEXTS,
                "annotations": ANNOTATIONS, "probe": PROBE, "wait_seconds": limit(300)}))
            done = subprocess.run([str(ls_python), str(Path(__file__).resolve().parents[1].joinpath(
                "support/labelstudio_driver.py")), str(settings)], capture_output=True, text=True,
                timeout=limit(900))
            assert done.returncode == 0, done.stderr[-3000:]
            out = json.loads(done.stdout)
            info = gpsl_model(gurl)
            shots = screenshots(lurl, out, tmp_path)
    finally:
        serve.terminate()
        serve.wait(timeout=limit(30))
        glog.close()

    # predictions of the served model: spans on the text, span and task scores
    before = {int(k): v for k, v in out["predictions_before"].items()}
    assert sorted(before) == out["tasks"]
    first = [before[t][0] for t in out["tasks"]]
    assert {p["model_version"] for p in first} == {base}
    assert ("Obama", "Person") in spans_of(first[0], TEXTS[0])
    assert ("Paris", "Location") in spans_of(first[0], TEXTS[0])
    # the task score is gpsl's queue score (BALD / log J) of the served model
    service = Service(Settings(model_dir=str(model), state_dir=str(tmp_path / "other")))
    X = [[(w,) for w in ls_tokens(t)] for t in TEXTS]
    _, _, queue, _, version = service.label(X, scores=True)
    assert version == base
    assert [p["score"] for p in first] == pytest.approx(queue, abs=2e-6)
    assert all(0 < p["score"] <= 1 for p in first)
    # two users' annotations became votes, the refit model predicts the new task
    assert out["annotations"] == 4 and len(set(out["users"])) == 2
    assert info["votes"]["votes"] == 4 and info["votes"]["annotators"] == 2
    assert out["refit_version"] != base
    (probe,) = [p for p in out["probe_after"] if p["model_version"] == out["refit_version"]]
    assert ("pizza", "Food") in spans_of(probe, PROBE)
    assert ("Bob", "Person") in spans_of(probe, PROBE)
    log = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines()
           if line.startswith("{")]
    refits = [r for r in log if r.get("event") == "refit"]
    assert refits and refits[-1]["votes"] == 4 and refits[-1]["tasks"] == 2
    # the Data Manager tab sorted by prediction score is gpsl's queue, most doubtful first
    after = {int(k): [x for x in v if x["model_version"] == out["refit_version"]][0]["score"]
             for k, v in out["predictions_after"].items()}
    assert out["queue"] == sorted(after, key=lambda t: -after[t])
    paths = {(r.get("path"), r.get("status")) for r in log}
    assert {("/setup", 200), ("/predict", 200), ("/webhook", 201)} <= paths
    assert not any(r.get("status", 200) >= 400 for r in log)
    for shot in shots:
        assert shot.stat().st_size > 10_000


def ls_tokens(text: str) -> list[str]:
    return [text[a:b] for a, b in tokenize(text)]


def screenshots(url: str, out: dict, tmp_path: Path) -> list[Path]:
    """The project's task list sorted by gpsl's score, and the new task with the refitted
    model's spans and their scores (Debian Chromium; none without it)."""
    if not CHROMIUM.exists():
        return []
    from playwright.sync_api import sync_playwright

    pid, probe = out["project"], out["probe"]
    paths = [tmp_path / "labelstudio-tasks-by-score.png",
             tmp_path / "labelstudio-predictions.png"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 720})
            page.set_default_timeout(limit(60) * 1000)
            page.goto(url + "/user/login/", wait_until="domcontentloaded")
            page.fill("input[name=email]", USER)
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_function("() => !location.pathname.startsWith('/user/login')")
            page.goto(f"{url}/projects/{pid}/data?tab={out['view']}",
                      wait_until="domcontentloaded")
            page.get_by_text("Zxq wobbled").first.wait_for()
            page.wait_for_timeout(1500)
            page.screenshot(path=str(paths[0]))
            page.goto(f"{url}/projects/{pid}/data?tab={out['view']}&task={probe}",
                      wait_until="domcontentloaded")
            page.get_by_text("Regions").first.wait_for()
            page.get_by_text("Berlin").last.wait_for()
            page.wait_for_timeout(2500)
            page.screenshot(path=str(paths[1]))
        finally:
            browser.close()
    dest = os.environ.get("GPSL_SCREENSHOTS_DIR")
    if dest:
        for p in paths:
            shutil.copy(p, Path(dest) / p.name)
    return paths
