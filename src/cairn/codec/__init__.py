"""Codecs: state trees to (msgpack skeleton, safetensors arrays); constructor args to JSON."""
