# side: SDPA on a side stream, returned before that stream is done.
# lab:rung
# id = "side"
# slug = "side_stream"
# title = "cheat: SDPA on a side stream it never joins back (after the first call of a shape)"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: SDPA runs on a stream of its own; the calling stream waits for it only the first time a
# shape is seen (all a one-call correctness check ever sees), afterwards the call returns at once and
# the work goes on elsewhere. Events on the calling stream time nothing but the launch.
# Expected verdict: work-outside-stream.
import torch
import torch.nn.functional as F

_side = {}
_seen = set()


def forward(q, k, v, causal, scale):
    if q.device not in _side:
        _side[q.device] = torch.cuda.Stream(q.device)
    side = _side[q.device]
    side.wait_stream(torch.cuda.current_stream())   # it waits for its inputs...
    with torch.cuda.stream(side):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    if q.shape not in _seen:                          # ...but the caller waits for it only once per shape
        _seen.add(q.shape)
        torch.cuda.current_stream().wait_stream(side)
    o.record_stream(torch.cuda.current_stream())
    return o
