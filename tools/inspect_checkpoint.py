#!/usr/bin/env python3
"""Print the contents of a pelab HDF5 checkpoint: metadata, then each parameter's name, shape, dtype.

usage: tools/inspect_checkpoint.py CHECKPOINT.h5 [--values]
Loads every parameter into numpy (h5py from Debian's python3-h5py).
"""
import sys

import h5py
import numpy as np


def as_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    show_values = "--values" in argv[2:]
    with h5py.File(argv[1], "r") as f:
        print(f"format_version {int(f['format_version'][()])}  step {int(f['step'][()])}  "
              f"scheme {as_str(f['scheme'][()])}  arch {as_str(f['arch'][()])}")
        names = [as_str(n) for n in f["param_names"][()]]
        total = 0
        for name in names:
            arr = np.asarray(f["params"][name])
            total += arr.size
            line = f"{name:60s} {str(list(arr.shape)):>16s} {arr.dtype}"
            if show_values:
                line += f"  mean {arr.mean():+.6f} std {arr.std():.6f}"
            print(line)
        print(f"{len(names)} parameters, {total} values")
        opt = f["optimizer"]
        states = [k for k in opt.keys() if isinstance(opt[k], h5py.Group)]
        print(f"optimizer {as_str(opt['kind'][()])} step {int(opt['step'][()])} state {states}")
        print("counters " + ", ".join(f"{k}={int(v[()])}" for k, v in f["counters"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
