"""Every aten and tritonkit op of one tritonkit-patched `tritonkit bench train` step (forward with
labels, loss, backward), counted by op, output shape and the autograd node that ran it ("fwd" in
the forward): where the step's small kernels (cat, fill, add, copy) come from. Views are left out.

    PYTHONPATH=src python3 benchmarks/trace_train_step.py [--config tiny] [--layers 2] [--unpatched]

Runs on the CPU (the interpreter) at the tiny config in bfloat16, so attention takes the kernels.
"""
import argparse
import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tritonkit.bench import train as T

VIEWS = {"view", "transpose", "unsqueeze", "t", "_unsafe_view", "expand", "slice", "select", "alias", "detach",
         "reshape", "permute", "squeeze", "as_strided", "split", "unbind", "narrow", "lift_fresh"}


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ not in VIEWS:
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            node = torch._C._current_autograd_node()
            shape = tuple(first.shape) if isinstance(first, torch.Tensor) else None
            self.count[(str(func), shape, node.name() if node is not None else "fwd")] += 1
        return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tiny", choices=sorted(T.CONFIGS))
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--unpatched", action="store_true", help="transformers' own model")
    args = parser.parse_args()
    config = dict(T.CONFIGS[args.config], layers=args.layers)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = T.llama(config, device, torch.bfloat16)
    if not args.unpatched:
        import tritonkit.transformers as tkt
        tkt.patch(model)
    x = T.markov_batches(config, device, 1)[0]
    model(input_ids=x, labels=x).loss.backward()  # warm-up: lazy initialisation stays out of the count
    model.zero_grad(set_to_none=True)
    with Ops() as ops:
        model(input_ids=x, labels=x).loss.backward()
    rows = sorted(ops.count.items(), key=lambda kv: (kv[0][2] != "fwd", kv[0][2], kv[0][0]))
    for (op, shape, node), n in rows:
        print(f"{n:4d}  {op:48s} {str(shape):22s} {node}")


if __name__ == "__main__":
    main()
