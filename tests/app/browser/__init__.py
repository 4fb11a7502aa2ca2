"""The app in a real browser (Playwright with Debian's Chromium): marker ``browser``."""
