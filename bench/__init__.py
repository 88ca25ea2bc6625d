"""cairn's benchmark suite: ``python -m bench`` (see docs/performance.md).

Every figure is a ratio to a baseline measured in the same run on the same
data (raw disk bandwidth, torch.save/torch.load, safetensors, a bare Python
start), so that it holds on a noisy shared machine. Not run by pytest.
"""
