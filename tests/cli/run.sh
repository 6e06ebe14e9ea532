#!/usr/bin/env bash
# cclc's command line: usage errors exit 2 with one clear message; --help and --version
# exit 0. Each case: the arguments, the exit status, and a fixed string the output must hold.
set -u
build=$1
cd "$(dirname "$0")/../.."
ring=algorithms/allreduce/ring.ccl
check() {
    local name=$1 want_status=$2 want_text=$3
    shift 3
    local out status
    out=$(timeout 20 "$build/cclc" "$@" 2>&1)
    status=$?
    if [ "$status" != "$want_status" ]; then
        echo "FAIL cli/$name: exit $status, expected $want_status: $out"
    elif ! grep -qF -- "$want_text" <<<"$out"; then
        echo "FAIL cli/$name: output lacks '$want_text': $out"
    else
        echo "ok cli/$name"
    fi
}
check help 0 "usage: cclc COMMAND FILE --ranks N" --help
check version 0 "cclc 0." --version
check no_command 2 "cclc: error: no command given"
check unknown_command 2 "unknown command 'prove'" prove $ring --ranks 4
check unknown_flag 2 "cclc check: error: unknown option '--rnks' (see cclc --help)" check $ring --rnks 4
check missing_ranks 2 "cclc check: error: --ranks N is required" check $ring
check missing_file 2 "cannot read 'no/such.ccl'" check no/such.ccl --ranks 4
check directory 2 "is a directory" check algorithms --ranks 4
check ranks_zero 2 "--ranks 0: expected an integer in 1..1024" check $ring --ranks 0
check ranks_huge 2 "--ranks 100000: expected an integer in 1..1024" check $ring --ranks 100000
check ranks_not_int 2 "--ranks four: expected an integer in 1..1024" check $ring --ranks four
check not_admitted 2 "is for N in 2..64, not N = 1" check $ring --ranks 1
check cuda_needs_rank 2 "cclc cuda: error: --rank R is required" cuda $ring --ranks 4
check bad_dtype 2 "cclc cuda: error: --dtype f8: unknown dtype (expected f32," cuda $ring --ranks 4 --rank 0 --dtype f8
check bad_op 2 "cclc cuda: error: --op mean: unknown reduction op (expected sum," cuda $ring --ranks 4 --rank 0 --op mean
check bad_protocol 2 "cclc cuda: error: --protocol ll64: expected simple, ll or ll128" cuda $ring --ranks 4 --rank 0 --protocol ll64
check cuda_ll128 0 "LL128: remote writes are 128-byte lines" cuda algorithms/allreduce/allpairs.ccl --ranks 4 --rank 0 --protocol ll128
check cuda_ll128_v_as_ll 0 "(run as ll: a v-collective's lines are LL's)" cuda algorithms/allgatherv/direct_ll.ccl --ranks 4 --rank 0 --protocol ll128
check two_files 2 "unexpected argument" check $ring $ring --ranks 4
check run_two_files 2 "cclc run: error: unexpected argument '$ring' (one FILE per run)" run $ring $ring --ranks 2

# Every command reads its options with the tools' harness (tools/common/options.c):
# one message per bad value, naming the option and the value as written, the same
# number syntax (decimal, never octal; K, KB, KiB, M, G) and the same option forms
# ("--ranks 4", "--ranks=4"), with the command's name and usage line.
for cmd in check plan cuda run; do
    rank=; [ $cmd = cuda ] && rank="--rank 0"
    check "${cmd}_ranks_bad" 2 "cclc $cmd: error: --ranks 4x: expected an integer in 1..1024" $cmd $ring --ranks 4x $rank
    check "${cmd}_ranks_negative" 2 "cclc $cmd: error: --ranks -2: expected an integer in 1..1024" $cmd $ring --ranks -2 $rank
    check "${cmd}_ranks_missing_value" 2 "cclc $cmd: error: --ranks needs a value" $cmd $ring $rank --ranks
    check "${cmd}_root_bad" 2 "cclc $cmd: error: --root r1: expected an integer in 0..1023" $cmd $ring --ranks 4 $rank --root r1
    check "${cmd}_root_negative" 2 "cclc $cmd: error: --root -1: expected an integer in 0..1023" $cmd $ring --ranks 4 $rank --root -1
    check "${cmd}_unknown_option" 2 "cclc $cmd: error: unknown option '--fast' (see cclc --help)" $cmd $ring --ranks 4 $rank --fast
    check "${cmd}_usage_line" 2 "usage: cclc $cmd FILE --ranks N" $cmd $ring --ranks 4 $rank --fast
    check "${cmd}_no_file" 2 "cclc $cmd: error: no algorithm FILE given" $cmd --ranks 4 $rank
done
check check_flag_with_value 2 "cclc check: error: unknown option '--explain=yes'" check $ring --ranks 4 --explain=yes
check plan_json_with_value 2 "cclc plan: error: unknown option '--json=1'" plan $ring --ranks 4 --json=1
check cuda_kernel_only_value 2 "cclc cuda: error: unknown option '--kernel-only=1'" cuda $ring --ranks 4 --rank 0 --kernel-only=1
check cuda_rank_bad 2 "cclc cuda: error: --rank 0x1: expected an integer in 0..1023" cuda $ring --ranks 4 --rank 0x1
check cuda_rank_above 2 "cclc cuda: error: --rank 4: expected an integer in 0..3 (--ranks 4)" cuda $ring --ranks 4 --rank 4
check cuda_dtype_missing 2 "cclc cuda: error: --dtype needs a value" cuda $ring --ranks 4 --rank 0 --dtype
check cuda_op_inline 2 "cclc cuda: error: --op avg2: unknown reduction op" cuda $ring --ranks 4 --rank 0 --op=avg2
check cuda_protocol_missing 2 "cclc cuda: error: --protocol needs a value" cuda $ring --ranks 4 --rank 0 --protocol
# Options of another command are not silently ignored.
check check_no_dtype 2 "cclc check: error: unknown option '--dtype'" check $ring --ranks 4 --dtype f32
check plan_no_explain 2 "cclc plan: error: unknown option '--explain'" plan $ring --ranks 4 --explain
check check_no_json 2 "cclc check: error: unknown option '--json'" check $ring --ranks 4 --json
check run_count_bad 2 "cclc run: error: --count 12q: not a count" run $ring --ranks 2 --count 12q
check run_dtype_bad 2 "cclc run: error: --dtype f17: unknown dtype" run $ring --ranks 2 --dtype f17
check run_op_bad 2 "cclc run: error: --op mean: unknown reduction op" run $ring --ranks 2 --op mean
check run_backend_bad 2 "cclc run: error: --backend tpu: expected cpu, gpu or auto" run $ring --ranks 2 --backend tpu
check run_iters_bad 2 "cclc run: error: --iters 0: expected an integer in 1..1000000" run $ring --ranks 2 --iters 0
check run_timeout_bad 2 "cclc run: error: --timeout-ms 1.5: expected an integer" run $ring --ranks 2 --timeout-ms 1.5
# Decimal, never octal, and the size suffixes: the same N whichever way it is written.
same_plan() {
    local name=$1 a=$2 b=$3
    if [ "$("$build/cclc" plan $ring $a 2>&1)" = "$("$build/cclc" plan $ring $b 2>&1)" ] &&
        "$build/cclc" plan $ring $a >/dev/null 2>&1; then
        echo "ok cli/$name"
    else
        echo "FAIL cli/$name: plan $a differs from plan $b"
    fi
}
same_plan ranks_decimal_not_octal "--ranks 010" "--ranks 10"
same_plan ranks_inline_value "--ranks=8" "--ranks 8"
check ranks_kib 2 "is for N in 2..64, not N = 1024" check $ring --ranks 1K
check ranks_kb 2 "is for N in 2..64, not N = 1024" check $ring --ranks 1KB
check cuda_rank_decimal 0 "" cuda $ring --ranks 12 --rank 011
check proved 0 "" check $ring --ranks 4
check explain 0 "postcondition:" check $ring --ranks 4 --explain
check plan_json 0 '"algorithm": "ring"' plan $ring --ranks 4 --json
# v-collectives: proved and planned like the others (the plan names each chunk's data,
# which sizes it at run time); the CUDA emitter sizes chunks from segment tables, up to
# N = 32 (the tables sit in shared memory), and refuses more, located at the header.
check allgatherv_explain 0 "their own segment and position" check algorithms/allgatherv/ring.ccl --ranks 4 --explain
check alltoallv_plan 0 "(data of in@1[0])" plan algorithms/alltoallv/pairwise.ccl --ranks 2
check alltoallv_plan_json 0 '"content": [2]' plan algorithms/alltoallv/pairwise.ccl --ranks 2 --json
check alltoallv_cuda 0 "a.varena_bytes, t.w, vt, 1, 1, 0, &vload_cs)" cuda algorithms/alltoallv/pairwise.ccl --ranks 2 --rank 0
check alltoallv_cuda_refused 1 "pairwise.ccl:23:22: error: CUDA emission of alltoallv programs is limited to N <= 32" \
    cuda algorithms/alltoallv/pairwise.ccl --ranks 33 --rank 0
check run_v_counts_length 2 "--counts: 3 values given, 4 expected (N = 4)" run algorithms/allgatherv/ring.ccl \
    --ranks 4 --counts 1,2,3
check run_v_counts_kind 2 "--counts: an alltoallv takes --counts-matrix (N*N values)" run \
    algorithms/alltoallv/pairwise.ccl --ranks 2 --counts 1,2
check run_v_inplace 2 "--inplace: allgatherv and alltoallv have no in-place form" run algorithms/allgatherv/ring.ccl \
    --ranks 2 --inplace
check run_v_matrix 0 "counts=3,0,0,5 iters=3 out-of-place: ok" run algorithms/alltoallv/pairwise.ccl --ranks 2 --counts-matrix 3,0,0,5
check run_v_two_chunks 0 "iters=3 out-of-place: ok" run tests/cuda/alltoallv_k2.ccl --ranks 3 \
    --counts-matrix 1,0,7,100,3,0,17,2,9
# The JSON plan of every shipped algorithm parses as JSON (those for several nodes as 2
# nodes of 2 ranks).
bad=0
for f in algorithms/*/*.ccl; do
    nodes=1
    grep -q '^nodes ' "$f" && nodes=2
    "$build/cclc" plan "$f" --ranks 4 --nodes $nodes --json 2>/dev/null | python3 -m json.tool >/dev/null 2>&1 || { echo "FAIL cli/json $f"; bad=1; }
done
[ $bad = 0 ] && echo "ok cli/json_plans_parse"

# Hostile inputs end in a located error, never a signal: operator chains far past the
# depth every pass may recurse to (CCLC_MAX_EXPR_DEPTH), in the header, a let and an
# index; through cclc check and through the library (cclc run loads with
# ccl_algorithm_load), and one near the 16 MiB input limit.
tmp=$(mktemp -d)
chain() { python3 -c "import sys; print(' + 0' * int(sys.argv[1]))" "$1"; }
{ echo "algorithm a : allreduce"; echo "ranks N in 2..64"; echo "chunks 1 $(chain 200000)"
  echo "for r in 0..N on r tb 0 { copy out[0] <- in[0] }"; } >"$tmp/header.ccl"
{ echo "algorithm a : allreduce"; echo "ranks N in 2..64"
  echo "for r in 0..N on r tb 0 { let x = 0 $(chain 200000)"; echo "copy out[x] <- in[0] }"; } >"$tmp/let.ccl"
{ echo "algorithm a : allreduce"; echo "ranks N in 2..64"
  echo "for r in 0..N on r tb 0 { copy out[0 $(chain 200000)] <- in[0] }"; } >"$tmp/index.ccl"
{ echo "algorithm a : allreduce"; echo "ranks N in 2..64"; echo "chunks 1 $(chain 4000000)"
  echo "for r in 0..N on r tb 0 { copy out[0] <- in[0] }"; } >"$tmp/huge.ccl"
for f in header let index huge; do
    check "deep_chain_$f" 1 "expression too deep: more than 1000 operators nest here" check "$tmp/$f.ccl" --ranks 4
done
check deep_chain_library 1 "expression too deep" run "$tmp/let.ccl" --ranks 2 --backend cpu
# 100000 declarations of each kind: name lookups are constant time (a linear lookup
# took 3.5 s at 30000 scratch buffers and would pass the 20 s bound here).
python3 -c "
print('algorithm a : allreduce\nranks N in 2..64')
for i in range(100000): print('scratch s%d[1]' % i)
for i in range(100000): print('let v%d = %d' % (i, i))
print('for r in 0..N on r tb 0 { copy out[0] <- in[v99999 - 99999] }')" >"$tmp/names.ccl"
check many_names 1 "postcondition fails" check "$tmp/names.ccl" --ranks 4
rm -rf "$tmp"

# The conditional expression and the bit built-ins (docs/language.md): a direct
# all-gather written with them proves for N = 2, 3, 5, 8 and runs; the branch not taken
# is never evaluated; each built-in's bad argument is a located error.
for n in 2 3 5 8; do
    check "conditional_proves_N$n" 0 "" check tests/cli/programs/conditional.ccl --ranks "$n"
done
check conditional_runs 0 "N=5 threads backend=cpu" run tests/cli/programs/conditional.ccl --ranks 5 --backend cpu --count 1001
tmp=$(mktemp -d)
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[r > 0 ? 0 : log2(r)] }\n' >"$tmp/taken.ccl"
check conditional_evaluates_the_taken_branch 1 "log2 of 0: the argument must be positive (when r = 0)" check "$tmp/taken.ccl" --ranks 2
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[(r < 0 ? log2(r) : 0) + bitrev(r, 1) * 0 + popcount(r) * 0 + clog2(r + 1) * 0] }\n' >"$tmp/lazy.ccl"
# (the program is no all-reduce: reaching the proof means every expression evaluated)
check conditional_skips_the_other_branch 1 "postcondition fails" check "$tmp/lazy.ccl" --ranks 2
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[bitrev(r + 2, 1) * 0] }\n' >"$tmp/bitrev.ccl"
check bitrev_out_of_range 1 "bitrev(2, 1): the value must fit in the bits" check "$tmp/bitrev.ccl" --ranks 2
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[clog2(r) * 0] }\n' >"$tmp/clog2.ccl"
check clog2_of_zero 1 "clog2 of 0: the argument must be positive" check "$tmp/clog2.ccl" --ranks 2
rm -rf "$tmp"

# Empty sets are empty lists (docs/language.md): a reduce whose operand comprehensions
# are empty at the first or last root proves for every root at the ends and runs.
for nr in "2 0" "2 1" "3 0" "3 2" "5 0" "5 4"; do
    read -r n root <<<"$nr"
    check "empty_sets_N${n}_root$root" 0 "" check tests/cli/programs/empty_sets.ccl --ranks "$n" --root "$root"
done
check empty_sets_runs 0 "N=5 threads backend=cpu" run tests/cli/programs/empty_sets.ccl --ranks 5 --root 4 --backend cpu --count 999

# Header names (docs/language.md, "The header"): a top-level let feeds `chunks`, the
# chunk count is named (K, or `chunks NAME = ...`) and later header items use it.
for n in 2 3 5 8 16; do
    check "header_names_proves_N$n" 0 "" check tests/cli/programs/header_names.ccl --ranks "$n"
done
check header_names_runs 0 "N=5 threads backend=cpu" run tests/cli/programs/header_names.ccl --ranks 5 --backend cpu --count 1001

# Bounded folds (docs/language.md, "Expressions"): a binomial-tree broadcast whose rank
# maps are sums, minima and maxima over ranges proves for every root at several N and
# runs; an empty min, a fold past its term limit and an unknown fold are located errors.
for nr in "2 0" "2 1" "5 0" "5 3" "8 7" "13 6" "16 0"; do
    read -r n root <<<"$nr"
    check "folds_N${n}_root$root" 0 "" check tests/cli/programs/folds.ccl --ranks "$n" --root "$root"
done
check folds_runs 0 "N=5 threads backend=cpu" run tests/cli/programs/folds.ccl --ranks 5 --root 3 --backend cpu --count 999
tmp=$(mktemp -d)
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[min(i in 0..r: i)] }\n' >"$tmp/empty.ccl"
check fold_empty_min 1 "min over the empty range 0..0 has no value (when r = 0)" check "$tmp/empty.ccl" --ranks 2
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[sum(i in 0..1G: i) * 0] }\n' >"$tmp/long.ccl"
check fold_term_limit 1 "sum over 0..1073741824 has more than 1048576 terms" check "$tmp/long.ccl" --ranks 2
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[sum(i in 0..4: sum(j in 0..1G: j)) * 0] }\n' >"$tmp/nested.ccl"
check fold_nested_limit 1 "more than 1048576 terms (when r = 0, i = 0)" check "$tmp/nested.ccl" --ranks 2
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[sum(i in 0..9K: sum(j in 0..9K: j)) * 0] }\n' >"$tmp/product.ccl"
check fold_iteration_limit 1 "loop iterations" check "$tmp/product.ccl" --ranks 2
printf 'algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[prod(i in 1..3: i) * 0] }\n' >"$tmp/prod.ccl"
check fold_unknown 1 "unknown fold 'prod' (known: sum, min and max" check "$tmp/prod.ccl" --ranks 2
# Folds nest as deep as any expression, and no deeper.
python3 -c "print('algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[' + 'sum(i in 0..1: ' * 1200 + '0' + ')' * 1200 + '] }')" >"$tmp/deep.ccl"
check fold_depth_limit 1 "too deep" check "$tmp/deep.ccl" --ranks 2
python3 -c "print('algorithm a : allreduce\nranks N in 2..8\nfor r in 0..N on r { copy out[0] <- in[' + 'sum(i in 0..1: ' * 100 + '0' + ')' * 100 + '] }')" >"$tmp/nest100.ccl"
check fold_nests_100 1 "postcondition fails" check "$tmp/nest100.ccl" --ranks 2
rm -rf "$tmp"

# Cause first (docs/language.md, "Running cclc"): a lost wait's race at its site comes
# first, and the signal it leaves unmatched is an effect, shown after it only with
# --all-errors; the library keeps both.
f=tests/verify/missing_wait_cause_first.ccl
check cause_first_hides_effects 1 "1 more error not shown" check $f --ranks 4
out=$("$build/cclc" check $f --ranks 4 --all-errors 2>&1)
if [ "$(grep -c ': error: ' <<<"$out")" = 2 ] && grep -m1 ': error: ' <<<"$out" | grep -q "data race" \
   && grep ': error: ' <<<"$out" | tail -1 | grep -q "never waited for" && ! grep -q "not shown" <<<"$out"; then
    echo "ok cli/all_errors_cause_first"
else
    echo "FAIL cli/all_errors_cause_first: $out"
fi
check run_keeps_all_errors 1 "never waited for" run $f --ranks 4 --backend cpu

# --inplace where the program is not proved in place: cclc run says that the input is
# copied aside first, and the run is right; a program proved in place gets no note.
check inplace_note 0 "is not proved in place for N = 2" run tests/cli/programs/not_in_place.ccl --ranks 2 --backend cpu --inplace --count 999
check inplace_note_run_ok 0 "in-place: ok" run tests/cli/programs/not_in_place.ccl --ranks 2 --backend cpu --inplace --count 999
out=$("$build/cclc" run $ring --ranks 2 --backend cpu --inplace --count 99 2>&1)
if grep -q "not proved in place" <<<"$out"; then echo "FAIL cli/inplace_no_note: $out"; else echo "ok cli/inplace_no_note"; fi
# --help lists every option of run and check's --all-errors.
for opt in --back-to-back --host-buffers --timeout-ms --all-errors --inplace; do
    check "help_lists_${opt#--}" 0 "$opt" --help
done

# Named semaphores (docs/language.md, "Synchronization"): waits pair with signals of
# their own name, so the program below waits for the high halves first; it proves at
# several N and runs (also back to back); without the names it races; LL emission runs
# it as Simple (LL pairs lines with signals by position).
f=tests/cli/programs/named_semaphores.ccl
for n in 2 3 5 8 16; do
    check "named_semaphores_proves_N$n" 0 "" check $f --ranks "$n"
done
check named_semaphores_runs 0 "N=5 threads backend=cpu" run $f --ranks 5 --backend cpu --count 1001 --iters 5
check named_semaphores_back_to_back 0 "back-to-back: ok" run $f --ranks 4 --backend cpu --count 1001 --iters 5 --back-to-back
tmp=$(mktemp -d)
sed 's/\[\(ready\|lo\|hi\)\] / /' $f >"$tmp/unnamed.ccl"
check named_semaphores_needed 1 "data race on scratch" check "$tmp/unnamed.ccl" --ranks 3
rm -rf "$tmp"
check named_semaphores_ll_as_simple 0 "run as simple" cuda $f --ranks 2 --rank 0 --protocol ll
