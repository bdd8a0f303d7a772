# pelab — sourced by bench/torch_venv.sh and bench/peer_venv.sh (not run on its own).
# venv_create TOOL BASE VENV [VENV-OPTION...]: makes the virtual environment VENV with BASE's
# `-m venv` (options such as --system-site-packages passed on) unless VENV already is one.
# Refuses with one line on stderr naming TOOL and returns 1 when BASE cannot make a venv with pip
# or VENV exists but is no venv (nothing is removed).
venv_create() {
  local tool="$1" base="$2" venv="$3"
  shift 3
  if ! "$base" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "$tool: $base cannot make a venv with pip (Debian: apt-get install python3-venv)" >&2
    return 1
  fi
  if [ -e "$venv" ] && [ ! -x "$venv/bin/python" ]; then
    echo "$tool: $venv exists but is no venv; remove it" >&2
    return 1
  fi
  [ -x "$venv/bin/python" ] || "$base" -m venv "$@" "$venv" >&2
}

# venv_pip TOOL VENV PROBE WANT PACKAGE...: pip-installs the PACKAGEs into VENV, then requires the
# shell function PROBE (what VENV's python imports) to print WANT; prints the size and time on
# stderr and VENV's python on stdout. Returns 1 with one line naming both when it does not.
venv_pip() {
  local tool="$1" venv="$2" probe="$3" want="$4" start got
  shift 4
  start=$(date +%s)
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2
  got="$("$probe")"
  if [ "$got" != "$want" ]; then
    echo "$tool: $venv: '$want' was installed but '$got' imports" >&2
    return 1
  fi
  echo "$tool: $want in $venv ($(du -sh "$venv" | cut -f1), $(( $(date +%s) - start )) s)" >&2
  echo "$venv/bin/python"
}
