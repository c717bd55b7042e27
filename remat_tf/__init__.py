"""Keras / TensorFlow adapter (not implemented yet; no open issue covers it)."""
