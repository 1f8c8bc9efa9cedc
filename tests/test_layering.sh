#!/usr/bin/env bash
# The layering of the source tree (DESIGN.md, docs/HACKING.md): every `#include "..."` of every
# C, C++ and CUDA file is an arrow from the including file's module to the included file's, and
# each arrow must be in the table below. Kernels are leaves, the loader knows nothing of models
# or ranks, nn/ reaches dist/ only through a callback the trainer wires, and nothing includes the
# trainer but main.c and its unit tests. System headers (<...>) are not arrows.
#
# Module of a file = its top-level directory (main.c is its own module; kernels/emu is part of
# kernels, dist/emu of dist). An include is resolved the way the compilers do with -I.: first
# beside the including file, then from the repository root.
set -euo pipefail
ROOT=${CTRAIN_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"

# module: the modules it may include besides itself ('*': any module except trainer and main.c).
ALLOWED="
main.c:  trainer nn loader dist kernels util
trainer: nn loader dist kernels util
nn:      kernels util
dist:    kernels util
loader:  util
kernels: util
util:
tools:   *
tests:   * trainer
"
# Headers the build writes into build/gen (-I), not part of any module: ctrain's commit.
GENERATED=" ctrain_commit.h "
# Nobody includes these but main.c and the tests (the table above says so).
NEVER_BY_STAR="trainer main.c"

declare -A may
modules=()
while IFS= read -r line; do
  [ -n "$line" ] || continue
  m=${line%%:*}
  modules+=("$m")
  may[$m]=" ${line#*:} "
done <<<"$ALLOWED"

module_of() { # repository-relative path -> module, or "" when it is in none
  local p=$1 top=${1%%/*}
  [ "$p" = main.c ] && { echo main.c; return; }
  [ "$top" != "$p" ] || { echo ""; return; }  # another file at the top level
  for m in "${modules[@]}"; do [ "$m" = "$top" ] && { echo "$m"; return; }; done
  echo ""
}

allowed() { # from to
  local from=$1 to=$2
  [ "$from" = "$to" ] && return 0
  case "${may[$from]}" in
    *" $to "*) return 0 ;;
    *" * "*) [[ " $NEVER_BY_STAR " == *" $to "* ]] && return 1; return 0 ;;
  esac
  return 1
}

# Every source file outside hidden directories and build outputs (build/, or BUILD_DIR=build-*).
mapfile -t files < <(find . \( -path './.*' -o -path './build' -o -path './build-*' \) -prune -o \
  -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \) -print \
  | sed 's|^\./||' | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || { echo "FAIL: no C/C++/CUDA source files found under $ROOT"; exit 1; }

violations=0 arrows=0
declare -A seen_from
for f in "${files[@]}"; do
  from=$(module_of "$f")
  if [ -z "$from" ]; then
    echo "$f: in no module of the table in tests/test_layering.sh (add its directory there)"
    violations=$((violations + 1))
    continue
  fi
  dir=$(dirname "$f")
  # line number and included path of each #include "..." (directives may have spaces after #)
  while IFS=: read -r line inc; do
    arrows=$((arrows + 1))
    seen_from[$from]=1
    [[ $GENERATED == *" $inc "* ]] && continue
    if [ -f "$dir/$inc" ]; then target=$(realpath -m --relative-to=. "$dir/$inc")
    else target=$(realpath -m --relative-to=. "$inc"); fi
    to=$(module_of "$target")
    if [[ $target == ../* ]] || [ -z "$to" ]; then
      echo "$f:$line: #include \"$inc\" resolves to $target, in no module"
      violations=$((violations + 1))
    elif ! allowed "$from" "$to"; then
      echo "$f:$line: $from -> $to (#include \"$inc\") is not allowed"
      violations=$((violations + 1))
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/; T; =; p' "$f" | paste -d: - -)
done

# A scan that saw nothing must not pass: no includes, or none from the modules that surely have them.
if [ "$arrows" = 0 ]; then
  echo "FAIL: found no #include \"...\" lines in ${#files[@]} files: the scan is broken, nothing was checked"
  exit 1
fi
for m in nn kernels dist loader util; do
  [ -n "${seen_from[$m]:-}" ] || { echo "FAIL: no includes found in $m/: the scan is broken"; exit 1; }
done

echo "$arrows include arrows in ${#files[@]} files checked, $violations not allowed"
[ "$violations" = 0 ] || { echo "FAIL: $violations include(s) break the layering (table at the top of $0)"; exit 1; }
echo "layering ok"
