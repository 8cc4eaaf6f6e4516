"""The first step of the data path: quantized models in, Relay module out."""
