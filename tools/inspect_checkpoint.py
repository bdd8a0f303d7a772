#!/usr/bin/env python3
"""Print the contents of a pelab HDF5 checkpoint: metadata, then each parameter's name, shape, dtype.

usage: tools/inspect_checkpoint.py CHECKPOINT.h5 [--values]
Loads every parameter into numpy (h5py from Debian's python3-h5py).
Errors (no such file, a directory, h5py missing, not a pelab checkpoint) are one line on stderr
with exit status 1.
"""
import os
import sys


def as_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    show_values = "--values" in argv[2:]
    path = argv[1]
    if os.path.isdir(path):
        return fail(f"{path} is a directory; give a checkpoint file (e.g. {path}/checkpoints/last.h5)")
    if not os.path.exists(path):
        return fail(f"{path}: no such file")
    try:
        import h5py  # noqa: F401 (imported here so that the errors above need no h5py)
        import numpy  # noqa: F401
    except ImportError as e:
        return fail(f"h5py (and numpy) are needed and cannot be imported by {sys.executable}: {e} "
                    "(Debian: apt-get install python3-h5py)")
    try:
        return inspect(path, show_values)
    except (OSError, KeyError, ValueError) as e:
        return fail(f"{path}: not a readable pelab checkpoint: {e}")


def fail(msg):
    print(f"inspect_checkpoint: error: {msg}", file=sys.stderr)
    return 1


def inspect(path, show_values):
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
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
