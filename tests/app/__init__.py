"""The Streamlit app and its pages (AppTest)."""
