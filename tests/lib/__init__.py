"""The library ``gpsl`` (model, features, inference, crowd models, calibration, I/O)."""
