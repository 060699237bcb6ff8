# joined: SDPA on a side stream, joined back properly.
# lab:rung
# id = "joined"
# slug = "joined"
# title = "honest: SDPA on a side stream that the calling stream waits for"
# dtypes = ["float16", "bfloat16", "float32"]
# head_dims = [64, 128]
# min_cc = "8.0"
# attacks = []
# entry = "forward"
# lab:end
#
# What changed: the work runs on a stream of its own and the calling stream waits for it (wait_stream)
# before the call returns: legitimate, and timed as such. Expected verdict: a time, the bare timer's.
import torch
import torch.nn.functional as F

_side = {}


def forward(q, k, v, causal, scale):
    if q.device not in _side:
        _side[q.device] = torch.cuda.Stream(q.device)
    side = _side[q.device]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    torch.cuda.current_stream().wait_stream(side)
    o.record_stream(torch.cuda.current_stream())
    return o
