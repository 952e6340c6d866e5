"""Conversion steps: one small class per step, each with typed options and one `run` method."""
