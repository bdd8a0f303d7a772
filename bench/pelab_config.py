"""pelab — the config keys of a pelab binary, read from `pelab config-reference` (its markdown table:
| `key` | type | `default` | allowed | doc |), for the benchmark scripts: run_bench.py takes the
registered PE schemes from it, bench_torch.py pelab's defaults (the config bench_train trains)."""
import subprocess


def reference_rows(pelab):
    """{key: (type, default, allowed)} of every row, the default converted by its type where it is
    one of its values."""
    ref = subprocess.run([pelab, "config-reference"], check=True, capture_output=True,
                         text=True).stdout
    rows = {}
    for line in ref.splitlines():
        if not line.startswith("| `"):
            continue
        cells = line.split("|")  # key, type, default and allowed hold no "|"
        key, typ, default = (c.strip().strip("`") for c in cells[1:4])
        conv = {"int": int, "float": float, "bool": lambda v: {"true": True, "false": False}[v]}
        try:
            default = conv[typ](default) if typ in conv else default
        except (ValueError, KeyError):
            pass  # a default that is no value of its type, such as "(none)": kept as text
        rows[key] = (typ, default, cells[4].strip())
    if "pe.scheme" not in rows:
        raise SystemExit("%s config-reference has no pe.scheme row" % pelab)
    return rows


def registered_schemes(pelab):
    """The registered PE schemes: the pe.scheme row's allowed values (from the scheme registry)."""
    allowed = reference_rows(pelab)["pe.scheme"][2]
    return [v.strip().strip("`") for v in allowed.split(",") if v.strip()]


def defaults(pelab):
    """pelab's default config as {section: {key: value}} (what bench_train starts from)."""
    out = {}
    for key, (_, default, _) in reference_rows(pelab).items():
        section, name = key.split(".", 1)
        out.setdefault(section, {})[name] = default
    return out
