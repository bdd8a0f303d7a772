"""pelab — which BLAS a benchmark process actually ran on, and the state of the host around a run.

A BLAS record (one JSON object, the same keys on both sides) holds "libs": the shared objects mapped
into the process (/proc/self/maps) whose name says BLAS, LAPACK or an OpenMP runtime — the files the
dynamic loader resolved, e.g. Debian's libblas.so.3 alternative, not what a build named — and, when
an OpenBLAS is mapped, its openblas_get_config(), build variant (openblas_get_parallel(): serial /
pthread / openmp), thread count and the kernels it runs (openblas_get_corename(): a DYNAMIC_ARCH
build picks them at load, e.g. its generic "Prescott" ones on a CPU it does not know; pelab's side
adds "kernels", how pelab chose them). bench_train.cpp (blas_record_json) prints it for pelab;
record() below makes it for the Python process (bench_torch.py adds PyTorch's own facts). describe()
turns one into the short label of the tables; run_bench.py writes every record in its JSON.
"""
import ctypes
import datetime
import os
import sys

LIB_MARKERS = ("blas", "lapack", "gomp", "libomp", "iomp", "mkl")
PARALLEL = {0: "serial", 1: "pthread", 2: "openmp"}
LIBBLAS = "/usr/lib/x86_64-linux-gnu/libblas.so.3"  # Debian's update-alternatives link


def mapped_libs(maps="/proc/self/maps"):
    """Paths of the mapped BLAS / LAPACK / OpenMP shared objects, in map order, without repeats."""
    libs = []
    with open(maps) as f:
        for line in f:
            i = line.find("/")
            if i < 0:
                continue
            path = line[i:].rstrip("\n")
            base = os.path.basename(path)
            if any(m in base for m in LIB_MARKERS) and path not in libs:
                libs.append(path)
    return libs


def record(maps="/proc/self/maps"):
    """This process's BLAS record. OpenBLAS is asked through ctypes on the very file that is mapped
    (dlopen of a loaded library returns the loaded copy), so the answer is the running one's."""
    libs = mapped_libs(maps)
    rec = {"libs": libs, "openblas_config": None, "openblas_parallel": None,
           "openblas_threads": None, "openblas_corename": None}
    for path in libs:
        if "openblas" not in os.path.basename(path):
            continue
        lib = ctypes.CDLL(path)
        # An OpenBLAS too old for one of these functions leaves that field None.
        if hasattr(lib, "openblas_get_config"):
            lib.openblas_get_config.restype = ctypes.c_char_p
            rec["openblas_config"] = lib.openblas_get_config().decode()
        if hasattr(lib, "openblas_get_parallel"):
            rec["openblas_parallel"] = PARALLEL.get(lib.openblas_get_parallel(), "unknown")
        if hasattr(lib, "openblas_get_num_threads"):
            rec["openblas_threads"] = lib.openblas_get_num_threads()
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            rec["openblas_corename"] = lib.openblas_get_corename().decode()
        break
    return rec


def torch_record(torch):
    """record() plus what PyTorch says of itself: version, intra-op threads, the BLAS / LAPACK its
    build was configured with (BLAS_INFO in torch.__config__.show()), its parallel backend, and
    whether MKL / oneDNN (mkldnn) are available to it; its ATen kernels' CPU capability
    (torch.backends.cpu.get_cpu_capability(), torch >= 2: DEFAULT / AVX2 / AVX512) and the MKL
    version line of the show() text. PyPI's torch links MKL statically into libtorch_cpu.so, so no
    MKL file is mapped: BLAS_INFO=mkl and the version line are what says so."""
    rec = record()
    show = torch.__config__.show()

    def setting(key):
        for part in show.replace("\n", ",").split(","):
            words = part.split()
            if words and words[-1].startswith(key + "="):
                return words[-1].split("=", 1)[1]
        return None

    backend = None
    for line in torch.__config__.parallel_info().splitlines():
        if "parallel backend" in line:
            backend = line.split(":", 1)[1].strip()
    rec.update(torch_version=torch.__version__, torch_threads=torch.get_num_threads(),
               torch_blas_info=setting("BLAS_INFO"), torch_lapack_info=setting("LAPACK_INFO"),
               torch_parallel_backend=backend, mkl=torch.backends.mkl.is_available(),
               mkldnn=torch.backends.mkldnn.is_available(), torch_cpu_capability=None,
               torch_mkl_version=None, torch_python=sys.executable)
    cpu = getattr(torch.backends, "cpu", None)
    if cpu is not None and hasattr(cpu, "get_cpu_capability"):
        rec["torch_cpu_capability"] = cpu.get_cpu_capability()
    for line in show.splitlines():  # "- Intel(R) oneAPI Math Kernel Library Version 2024.2-..."
        if "Math Kernel Library Version" in line:
            rec["torch_mkl_version"] = line.split("Version", 1)[1].split()[0].split("-")[0]
    return rec


def blas_file(rec):
    """The mapped file that is the BLAS: the OpenBLAS if one is mapped, else the first libblas / MKL
    file (a reference BLAS, say), else None."""
    libs = [os.path.basename(p) for p in rec.get("libs", [])]
    for want in ("openblas", "blas", "mkl"):
        for path, base in zip(rec.get("libs", []), libs):
            if want in base:
                return path
    return None


def describe(rec):
    """One-line label without commas (CSV / table cell): the BLAS, its variant, kernels and threads,
    file."""
    libs = rec.get("libs", [])
    if rec.get("torch_blas_info") == "mkl" and not any("mkl" in os.path.basename(p) for p in libs):
        # PyPI's torch: MKL linked into libtorch_cpu.so, so no MKL file is mapped; a mapped
        # OpenBLAS there is another module's (numpy's libscipy_openblas), not torch's BLAS.
        others = [os.path.basename(p) for p in libs if "gomp" not in os.path.basename(p)]
        return "MKL %s linked into torch %s / ATen %s kernels / %s threads%s" % (
            rec.get("torch_mkl_version") or "(version not reported)", rec.get("torch_version"),
            rec.get("torch_cpu_capability") or "unknown", rec.get("torch_threads"),
            (" (also mapped: %s)" % " ".join(others)) if others else "")
    path = blas_file(rec) or "no BLAS mapped"
    if any("cublas" in os.path.basename(p) for p in rec.get("libs", [])):
        path += " + cuBLAS mapped (CUDA build)"
    if rec.get("openblas_config"):
        version = rec["openblas_config"].split()[:2]  # "OpenBLAS 0.3.21"
        return "%s %s build / %s kernels / %s threads / %s" % (
            " ".join(version), rec["openblas_parallel"], rec.get("openblas_corename") or "unknown",
            rec["openblas_threads"], path)
    return path


def libblas_alternative():
    """Where Debian's libblas.so.3 alternative points (what programs linked to -lblas, such as
    PyTorch's Debian build, load), or None when there is no such link."""
    if not os.path.lexists(LIBBLAS):
        return None
    return os.path.realpath(LIBBLAS)


SIMD_FLAGS = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "avx2", "fma", "avx")


def cpu_model(cpuinfo="/proc/cpuinfo"):
    """The first CPU's model name with its family / model / stepping and the SIMD flags that pick
    BLAS kernels (a VM's model name alone, "Intel Xeon Processor", says nothing)."""
    info = {}
    with open(cpuinfo) as f:
        for line in f:
            if not line.strip():
                break
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    if "model name" not in info:
        return "unknown"
    flags = info.get("flags", "").split()
    return "%s (family %s model %s stepping %s; %s)" % (
        info["model name"], info.get("cpu family"), info.get("model"), info.get("stepping"),
        " ".join(x for x in SIMD_FLAGS if x in flags) or "no AVX")


def loadavg():
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def host_state():
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "loadavg": loadavg(), "cpu_model": cpu_model(), "cpus": os.cpu_count()}


# The BLAS kernel settings (OPENBLAS_CORETYPE, PELAB_BLAS_CORETYPE) go with them.
THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_NUM_THREADS",
              "MKL_NUM_THREADS", "OPENBLAS_CORETYPE", "PELAB_BLAS_CORETYPE")


def thread_env(env=None):
    """The thread settings of an environment (unset ones as None)."""
    env = os.environ if env is None else env
    return {k: env.get(k) for k in THREAD_ENV}
