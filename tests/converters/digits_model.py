"""A factory that trains a small CNN on scikit-learn's digits when called (a few seconds)."""
from edgeopt_converters.source.examples import digits_splits, train_digits_cnn


def trained_cnn():
    return train_digits_cnn(*digits_splits()["train"])
