"""What several test modules share: the app's test stores and servers (``helpers``), the
load-scaled time limits (``limits``), the checkout's snapshot (``checkout``), crowd folders,
the model service's fixtures and Label Studio's environment.  Not collected (no ``test_`` files)."""
