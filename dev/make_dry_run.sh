# dev/make_dry_run.sh: sourced by the scripts make runs (dev/test_gpu.sh, dev/gpu_visit.sh).
# make_dry_run: true when make runs with -n (`make -n test-gpu`): make passes its single-letter flags as the first
# word of MAKEFLAGS, without a '-' and with no '=' in it (dev/bench_gpu.py's make_dry_run reads it the same way).
make_dry_run() {
    local flags=${MAKEFLAGS:-}
    flags=${flags#"${flags%%[![:space:]]*}"}
    flags=${flags%% *}
    [[ -n $flags && $flags != -* && $flags != *=* && $flags == *n* ]]
}
