"""Host-side format back-ends: PyTorch -> ONNX / TFLite, INT8 calibration, validation, manifest."""
