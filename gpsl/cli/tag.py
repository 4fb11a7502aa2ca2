"""``gpsl test`` and ``gpsl eval``: label a CRF++ column file with a saved model (like
``crf_test``), and score it against the file's gold labels.

``test`` writes every input token line (columns joined by tabs, a gold label column kept as
is) with the predicted label appended, and a blank line after each sentence, exactly like
``crf_test``; ``--marginals`` (or ``-v``/``-v1``) writes ``label/0.987654`` like
``crf_test -v1``.
"""

from __future__ import annotations

import argparse

from gpsl import metrics
from gpsl.cli import common
from gpsl.errors import InputError

_DECODER_HELP = "decoder (default: the model's; auto: exact for the ner feature set, else rns)"


def add_parsers(sub) -> None:
    p = sub.add_parser("test", help="label a CRF++ column file (like crf_test)",
                       description="Append the predicted label to every token line.")
    p.add_argument("-m", "--model", required=True, metavar="MODEL_DIR")
    common.add_params(p, ("decoder",), decoder={"default": None, "help": _DECODER_HELP})
    p.add_argument("--marginals", action="store_true",
                   help="write label/probability (RNS marginal), like crf_test -v1")
    p.add_argument("-v", dest="verbose_level", type=int, default=0, metavar="LEVEL",
                   help="-v or -v1 is --marginals (crf_test compatibility)")
    common.add_encoding(p)
    common.add_output(p)
    common.add_max_tokens(p)
    p.add_argument("test_file", metavar="TEST_FILE")
    p.set_defaults(func=run_test)

    p = sub.add_parser("eval", help="token accuracy, Hamming loss and (BIO/IOB labels) "
                                    "conlleval per-type P/R/F1 on a labeled file")
    p.add_argument("-m", "--model", required=True, metavar="MODEL_DIR")
    common.add_params(p, ("decoder",), decoder={"default": None, "help": _DECODER_HELP})
    common.add_encoding(p)
    common.add_missing(p, "gold label marking a missing label, not scored (default _)")
    common.add_max_tokens(p)
    p.add_argument("test_file", metavar="TEST_FILE")
    p.set_defaults(func=run_eval)


#: tokens tagged at a time by ``gpsl test`` (features, Algorithm 2 and output of one chunk
#: held in memory; the result does not depend on it: sentences are tagged independently)
CHUNK_TOKENS = 50_000


def chunks(sentences, tokens: int = CHUNK_TOKENS):
    """Consecutive lists of sentences of about ``tokens`` tokens (at least one sentence)."""
    chunk, n = [], 0
    for s in sentences:
        chunk.append(s)
        n += len(s)
        if n >= tokens:
            yield chunk
            chunk, n = [], 0
    if chunk:
        yield chunk


def tag_chunk(model, sents, X, decoder, marginals: bool) -> str:
    """The output text of some sentences: each token line with its predicted label (and its
    RNS marginal, ``label/0.987654``, with ``marginals``)."""
    from gpsl.io import format_conll

    if marginals:
        pred, marg = labels_and_marginals(model, X, decoder)
        index = {c: i for i, c in enumerate(model.classes_)}
        extra = [
            [[f"{lab}/{float(P[j, index[lab]]):.6f}"] for j, lab in enumerate(labs)]
            for labs, P in zip(pred, marg, strict=True)
        ]
    else:
        extra = [[[lab] for lab in labs] for labs in model.predict(X, decoder=decoder)]
    text = conll_text(sents, extra)
    return format_conll(sents, extra_columns=extra, label=False) if text is None else text


def conll_text(sents, extra) -> str | None:
    """``format_conll(sents, extra_columns=extra, label=False)`` for ``extra`` of one field a
    token, when every field is a CoNLL column (a ``str``, not empty, without a space, tab or
    line break), checked on the text as a whole; ``None`` otherwise (``format_conll`` then
    names the field). Its check of every field was a third of ``gpsl test``'s CPU."""
    try:
        text = "".join(["".join(["\t".join((*tok, ex[0])) + "\n"
                                 for tok, ex in zip(s.tokens, e, strict=True)]) + "\n"
                        for s, e in zip(sents, extra, strict=True)])
    except (TypeError, ValueError):
        return None
    tokens = [tok for s in sents for tok in s.tokens]
    if (" " in text or "\r" in text or "\t\t" in text or "\t\n" in text or "\n\t" in text
            or text.startswith("\t") or min(map(len, tokens), default=1) == 0
            or text.count("\n") != len(tokens) + len(sents)
            or text.count("\t") != sum(map(len, tokens))):
        return None
    return text


def labels_and_marginals(model, X, decoder):
    """``model.predict(X, decoder=decoder)`` and ``model.predict_marginals(X)``, Algorithm 2
    run once when the decoder is ``rns``: its labels are then the argmax of the marginals
    (calibrated or not: a temperature, the one calibration the labels do not follow, never
    moves an argmax)."""
    resolve = getattr(model, "decoder_", None)  # "auto": the feature set's decoder
    if (resolve(decoder) if resolve else (decoder or model.decoder)) != "rns":
        return model.predict(X, decoder=decoder), model.predict_marginals(X)
    marg = model.predict_marginals(X)
    return [[model.classes_[i] for i in P.argmax(axis=1)] for P in marg], marg


def run_test(args: argparse.Namespace, chunk_tokens: int = CHUNK_TOKENS) -> int:
    """Read, tag and write ``chunk_tokens`` tokens at a time: the memory stays that of one
    chunk whatever the file's size. With ``-o`` the output goes to a temporary file beside
    it, renamed when every sentence is written (an error leaves no partial file); on stdout
    the chunks before an error have been written, as ``crf_test`` does."""
    from gpsl.io import iter_conll

    model = common.load_model(args.model)
    marginals = args.marginals or args.verbose_level >= 1
    sentences = iter_conll(args.test_file, encoding=args.encoding, labeled=False,
                           max_tokens=args.max_tokens)
    with common.output_stream(args.output, args.encoding) as write:
        for sents in chunks(sentences, chunk_tokens):
            X, _ = common.model_columns(model, sents, args.test_file)
            write(tag_chunk(model, sents, X, args.decoder, marginals))
    return 0


def run_eval(args: argparse.Namespace) -> int:
    model = common.load_model(args.model)
    sents, X, has_gold = common.read_for_model(model, args.test_file, args.encoding,
                                               args.max_tokens)
    if not has_gold:
        raise InputError(
            f"no gold label column: the file has {model.n_columns_} columns, the model's feature "
            f"columns only", source=args.test_file, line=sents[0].line)
    pred, marg = labels_and_marginals(model, X, args.decoder)
    total = right = missing = 0
    for s, labs in zip(sents, pred, strict=True):
        for tok, p in zip(s.tokens, labs, strict=True):
            gold = tok[-1]
            if gold == args.missing:
                missing += 1
                continue
            total += 1
            right += gold == p
    if total == 0:
        raise InputError(f"no gold labels to score (every label is {args.missing!r})",
                         source=args.test_file)
    acc = 100.0 * right / total
    print(f"tokens: {total + missing} (scored {total}, missing {missing})")
    print(f"accuracy: {acc:.2f}%")
    print(f"hamming loss: {100.0 - acc:.2f}%")
    gold = [[tok[-1] for tok in s.tokens] for s in sents]
    index = {c: i for i, c in enumerate(model.classes_)}
    gidx = [[index.get(g, -1) if g != args.missing else -1 for g in labs] for labs in gold]
    cal = metrics.calibration_summary(marg, gidx)
    state = calibration_state(model)
    print(f"marginals ({state}, labels known to the model): mean confidence "
          f"{cal['mean_confidence']:.4f}, accuracy {cal['accuracy']:.4f}, ECE (15 equal-mass "
          f"bins) {cal['ece_mass']:.4f}, ECE (10 bins) {cal['ece_width']:.4f}, NLL "
          f"{cal['nll']:.4f}, Brier {cal['brier']:.4f}")
    if metrics.is_chunk_label_set(lab for g in gold for lab in g if lab != args.missing):
        keep = [i for i, g in enumerate(gold) if args.missing not in g]
        print(f"chunks (conlleval, seqeval): {len(keep)} of {len(gold)} sentences with "
              "complete gold labels")
        print(metrics.conlleval_report([gold[i] for i in keep], [list(pred[i]) for i in keep]))
    return 0


def calibration_state(model) -> str:
    """``calibrated on 5 folds of the training sentences`` / ``calibrated on held-out labels``
    / ``uncalibrated: <why>`` from the model's record (:class:`gpsl.calibration.
    CalibrationRun`); ``calibrated``/``uncalibrated`` for a model saved without one."""
    run = getattr(model, "calibration_run_", None)
    if getattr(model, "calibrator_", None) is not None:
        if run is None or run.source == "none":
            return "calibrated"
        return "calibrated on " + (f"{run.folds} folds of the training sentences"
                                   if run.source == "folds" else "held-out labels")
    return "uncalibrated" if run is None or not run.reason else f"uncalibrated: {run.reason}"
