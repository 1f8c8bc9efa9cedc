# The one-line result format of tools/bench_gpu_train.c and tools/bench_gpu_torch.py, read by
# tools/bench_gpu_train.sh and tools/gpu_session.sh (sourced by both):
#   NAME ARCH SIZExSIZE batch N DTYPE MODE: X img/s (median step Y ms), memory H MiB held, U MiB device used, final loss L, ...
# bench_field N LINE: 1 img/s, 2 median step ms, 3 MiB held, 4 MiB device used, 5 final loss
# (empty when LINE is not such a line).
bench_field() {
  sed -n "s/.*: *\([0-9.]*\) img\/s (median step \([0-9.]*\) ms), memory \([0-9.]*\) MiB held, \([0-9.]*\) MiB device used, final loss \([^,]*\),.*/\\$1/p" <<<"$2"
}
# bench_ratio A B: A / B as "1.23x", or "n/a" when either is missing or not positive.
bench_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else printf "n/a" }'; }
