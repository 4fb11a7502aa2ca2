"""What loading a model for tagging imports: ``gpsl test`` on a small file is mostly start-up,
and ``scipy.optimize`` alone was a third of it (docs/speed.md, the whole command). A fit still
finds the optimiser (it is imported on first use, :mod:`gpsl._optimize`)."""

import subprocess
import sys
from pathlib import Path

import numpy as np

from gpsl import _optimize

ROOT = Path(__file__).resolve().parents[2]


def test_tagging_with_a_saved_model_never_imports_scipy_optimize(tmp_path):
    code = (
        "import sys\n"
        "from gpsl import GPSL\n"
        "from gpsl.cli import tag  # noqa: F401 - gpsl test's module\n"
        "m = GPSL.load(sys.argv[1])\n"
        "print(m.predict([[('the', 'DT'), ('cat', 'NN')]]))\n"
        "print(sorted(n for n in sys.modules if n.startswith('scipy.optimize')))\n")
    fit = ("import sys\nfrom gpsl import GPSL\n"
           "X = [[('the', 'DT'), ('cat', 'NN')], [('a', 'DT'), ('dog', 'NN')]]\n"
           "GPSL(max_iter=5).fit(X, [['B', 'I'], ['B', 'I']]).save(sys.argv[1])\n"
           "print('scipy.optimize' in sys.modules)\n")
    model = tmp_path / "model"
    made = subprocess.run([sys.executable, "-c", fit, str(model)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "True"  # the fit did reach the optimiser
    used = subprocess.run([sys.executable, "-c", code, str(model)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert used.returncode == 0, used.stderr
    labels, imported = used.stdout.strip().splitlines()
    assert labels.startswith("[[") and imported == "[]"


def test_the_lazy_optimisers_are_scipys():
    from scipy.optimize import minimize, minimize_scalar

    f = lambda x: float(np.sum((np.asarray(x) - 1.5) ** 2))  # noqa: E731
    a = _optimize.minimize(f, np.zeros(2), method="L-BFGS-B")
    b = minimize(f, np.zeros(2), method="L-BFGS-B")
    np.testing.assert_array_equal(a.x, b.x)
    assert _optimize.minimize_scalar(f).x == minimize_scalar(f).x
