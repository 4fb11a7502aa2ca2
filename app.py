"""gpsl Streamlit app: overview and browser of the bundled sample annotation project.

Run with ``make run`` (or ``streamlit run app.py``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from gpsl.io import read_conll

ROOT = Path(__file__).resolve().parent
PROJECT_FILE = ROOT / "sample_data" / "sample.conll"
MISSING = "_"
STATUSES = ("Fully labeled", "Partially labeled", "Unlabeled")


def sentence_status(n_tokens: int, n_labeled: int) -> str:
    if n_labeled == n_tokens:
        return STATUSES[0]
    return STATUSES[2] if n_labeled == 0 else STATUSES[1]


@st.cache_data(show_spinner=False)
def load_project(path: str, mtime_ns: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sentence table and token table of a CRF++ column file (``mtime_ns`` keys the cache)."""
    sentence_rows, token_rows = [], []
    for number, sent in enumerate(read_conll(path), start=1):
        labeled = len(sent) - sent.n_missing
        sentence_rows.append(
            {
                "#": number,
                "status": sentence_status(len(sent), labeled),
                "tokens": len(sent),
                "labeled": labeled,
                "complete": labeled / len(sent),
                "text": " ".join(tok[0] for tok in sent.tokens),
            }
        )
        for position, (tok, label) in enumerate(zip(sent.tokens, sent.labels), start=1):
            token_rows.append(
                {
                    "sentence": number,
                    "position": position,
                    "token": tok[0],
                    **{f"column {i}": value for i, value in enumerate(tok[1:], start=1)},
                    "label": MISSING if label is None else label,
                }
            )
    return pd.DataFrame(sentence_rows), pd.DataFrame(token_rows)


def label_sort_key(label: str) -> tuple[str, str]:
    """Group B-X and I-X of one entity type together."""
    return (label[2:], label[:2]) if label[:2] in ("B-", "I-") else (label, "")


st.set_page_config(page_title="gpsl", layout="wide")
st.title("gpsl — sequence labeling with Gaussian processes")
st.caption(
    f"Annotation project `{PROJECT_FILE.relative_to(ROOT)}`: CRF++ columns, "
    f"`{MISSING}` marks a token whose label is still missing."
)

sentences, tokens = load_project(str(PROJECT_FILE), PROJECT_FILE.stat().st_mtime_ns)
n_tokens = len(tokens)
n_labeled = int((tokens["label"] != MISSING).sum())

st.subheader("Overview")
c1, c2, c3, c4 = st.columns(4)
c1.metric("Sentences", f"{len(sentences):,}")
c2.metric("Tokens", f"{n_tokens:,}")
c3.metric("Labeled tokens", f"{n_labeled:,}")
c4.metric("Complete", f"{100 * n_labeled / n_tokens:.1f}%")

status_counts = sentences["status"].value_counts()
st.write(
    " · ".join(f"{name}: **{int(status_counts.get(name, 0))}** sentences" for name in STATUSES)
)

label_counts = Counter(tokens.loc[tokens["label"] != MISSING, "label"])
entity_labels = sorted((lab for lab in label_counts if lab != "O"), key=label_sort_key)
chart_data = pd.DataFrame(
    {
        "label": entity_labels,
        "entity type": [label_sort_key(lab)[0] for lab in entity_labels],
        "tokens": [label_counts[lab] for lab in entity_labels],
    }
)
fig = px.bar(
    chart_data,
    x="label",
    y="tokens",
    color="entity type",
    title="Labeled tokens per label",
    category_orders={"label": entity_labels},
)
fig.update_layout(height=360, margin={"t": 50, "b": 10})
st.plotly_chart(fig)
st.caption(f"Not in the chart: {label_counts.get('O', 0):,} labeled tokens outside any entity (O).")

st.subheader("Sentences")
shown = st.multiselect("Status", STATUSES, default=list(STATUSES))
table = sentences[sentences["status"].isin(shown)]
st.dataframe(
    table,
    hide_index=True,
    column_config={
        "#": st.column_config.NumberColumn("#", width="small"),
        "complete": st.column_config.ProgressColumn(
            "complete", help="share of the tokens that are labeled", format="percent",
            min_value=0.0, max_value=1.0,
        ),
        "text": st.column_config.TextColumn("sentence", width="large"),
    },
)

number = st.number_input(
    "Show the tokens of sentence", min_value=1, max_value=len(sentences), value=1, step=1
)
row = sentences.iloc[int(number) - 1]
st.markdown(f"**Sentence {row['#']}** — {row['status'].lower()}, {row['labeled']} of "
            f"{row['tokens']} tokens labeled")
st.dataframe(
    tokens[tokens["sentence"] == row["#"]].drop(columns="sentence"),
    hide_index=True,
)
