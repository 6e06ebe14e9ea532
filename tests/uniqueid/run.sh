#!/usr/bin/env bash
# Communicators from a unique id over TCP, with no MPI (docs/multinode.md, "A unique id
# over TCP"): build/tests/uniqueid/uniqueid forks the ranks, rank 0 makes the id
# (ccl_get_unique_id) and hands it to the others through pipes, and every rank calls
# ccl_comm_init_rank_id; several nodes simulated on one host (ranks_per_node), so ranks
# of different nodes share no memory and all their traffic goes through the TCP transport.
#
#   tests/uniqueid/run.sh BUILD
#
#   check-2x2, -4x1, -1x4  tests/multinode's cases (cases.h) on 3 counts each: ccl_barrier,
#              ccl_all_reduce (f32 sum, i32 max, f64 min, f32 avg), ccl_all_gather,
#              ccl_reduce_scatter and ccl_all_to_all, then from every root ccl_broadcast (f32,
#              i32) and ccl_reduce (f32 sum, i32 max), out of place and in place, 3 calls each,
#              every element checked; on several nodes the reduce-scatter of 65539 runs
#              reduce_scatter/hier, of 1001 direct_net, the broadcasts and reduces of 1 and 1001
#              hier, of 65539 (256 KB) hier_split; the log
#              says the data crossed the nodes through the proxy
#   p2p-2x2, -4x1  tests/multinode's point-to-point cases (cases.h) over TCP: a ring, pairwise
#              exchanges (grouped and not) and 20-message groups across nodes, on 3 counts
#              x (f32, i32), 3 calls each, every element checked; 40 small (eager) and large
#              messages to late receivers and from late senders, and the late receivers'
#              proxies must have kept exactly the sender's 8 credits of early messages at once
#   v-2x2, -4x1  tests/multinode's allgatherv and alltoallv cases (cases.h) over TCP: uneven
#              counts (a zero segment, one of 262147 elements), f32, i32, in place and not,
#              3 calls each, every segment and gap checked
#   split-2x2, -4x1, -3x2  tests/multinode's splits (cases.h) over TCP: by node, by local
#              index (each child over TCP connections of its own), with no color, uneven
#   split-skip rank 3 destroys its communicator without splitting: the others fail at once
#   skip       rank 3 never calls: ranks 0-2 fail within CCL_TIMEOUT_MS, the root naming rank 3
#   cookie     rank 3 has the id of an earlier root at the same address: refused for its
#              cookie, with a message; ranks 0-2 time out naming it
#   noroot     the id's process has ended: every rank fails, naming the root's address
#   baddev     rank 1's init refuses its device after the connections are made: it tells
#              the others, which fail at once, naming rank 1 and its reason
#   kill, killmid  a rank is killed while the others all-reduce (at once, or 300 ms later
#              in the middle of a call), as 2 nodes of 2, 4 of 1, 3 of 2, 2 of 3 and 6 of 1:
#              every survivor fails within 5 s (the timeout is 20 s), naming the killed rank
#              as gone, not a rank that stopped because of it (docs/multinode.md, "Failures")
#   badid      a damaged id, nranks 0, rank out of range, a NULL id: refused, each named
#   badaddr    CCL_BOOTSTRAP_ADDR unresolvable, not this host's, a bad port; CCL_SOCKET_IFNAME
#              naming no interface: ccl_get_unique_id fails, saying which and why
set -u
build=${1:?usage: tests/uniqueid/run.sh BUILD}
cd "$(dirname "$0")/../.."
prog=$build/tests/uniqueid/uniqueid
if [ ! -x "$prog" ]; then
    echo "FAIL uniqueid: $prog not built"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CCL_BACKEND=cpu
unset CCL_BOOTSTRAP_ADDR CCL_SOCKET_IFNAME CCL_RANKS_PER_NODE

show() { sed 's/^/    /' "$1" | head -20; }

for shape in 4:2 4:1 4:4; do
    np=${shape%:*} rpn=${shape#*:} nodes=$((${shape%:*} / ${shape#*:}))
    name="uniqueid/check-${nodes}x$rpn"
    CCL_DEBUG=INFO CCL_DEBUG_SUBSYS=INIT timeout -k 5 60 "$prog" check "$np" "$rpn" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL $name: exit $rc"
        tail -20 "$tmp/out" "$tmp/err" | sed 's/^/    /'
    elif [ "$(grep -c ': ok$' "$tmp/out")" -ne $((61 + 24 * np)) ] || ! grep -q '^wrong elements: 0$' "$tmp/out" ||
         [ "$(grep -c '^rank [0-9]*: wrong 0$' "$tmp/out")" -ne "$np" ]; then
        echo "FAIL $name: not every case checked out"
        grep -v ': ok$' "$tmp/out" | show /dev/stdin
    elif [ "$nodes" -gt 1 ] && [ "$(grep -cE '^(reduce-scatter count 65539 .*\(hier|reduce-scatter count 1001 .*\(direct_net|(broadcast|reduce) root [0-9]+ count (1|1001) .*\(hier|(broadcast|reduce) root [0-9]+ count 65539 .*\(hier_split)\.ccl\): ok$' "$tmp/out")" -ne $((8 + 24 * np)) ]; then
        echo "FAIL $name: not the programs for several nodes the size hints pick"
        grep -E '^(reduce-scatter count (1001|65539)|(broadcast|reduce) root 0 count (1|65539) )' "$tmp/out" | sed 's/^/    /'
    elif ! grep -q "ccl_comm_init_rank_id: communicator .* ready: rank 0 of $np ($nodes node" "$tmp/err"; then
        echo "FAIL $name: the communicator is not $nodes nodes of $rpn"
        grep ready "$tmp/err" | sed 's/^/    /'
    elif [ "$nodes" -gt 1 ] && [ "$(grep -cE 'inter-node proxy: [1-9][0-9]* messages \([1-9][0-9]* bytes\) sent to, [1-9][0-9]* received' "$tmp/err")" -ne "$np" ]; then
        echo "FAIL $name: not every rank's proxy carried traffic"
        grep -E 'proxy|ready' "$tmp/err" | sed 's/^/    /'
    else
        echo "ok $name: barriers, 24 all-reduce, 12 all-gather, 12 reduce-scatter, 12 all-to-all, $((6 * np)) broadcast and $((6 * np)) reduce cases (every root) x 3 calls over TCP, every element right"
    fi
done

for shape in 4:2 4:1 6:2; do
    np=${shape%:*} rpn=${shape#*:} nodes=$((${shape%:*} / ${shape#*:}))
    name="uniqueid/split-${nodes}x$rpn"
    CCL_DEBUG=INFO CCL_DEBUG_SUBSYS=INIT timeout -k 5 60 "$prog" split "$np" "$rpn" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ] || [ "$(grep -c '^split.*: ok$' "$tmp/out")" -ne 5 ] ||
       [ "$(grep -c '^rank [0-9]*: wrong 0$' "$tmp/out")" -ne "$np" ]; then
        echo "FAIL $name: exit $rc, not every split checked out"
        grep -v ': ok$' "$tmp/out" | show /dev/stdin
    elif ! grep -q "ccl_comm_split: communicator .* ready: rank 0 of $nodes ($nodes nodes of 1)" "$tmp/err" ||
         ! grep -q "ccl_comm_split: rank 0 of $nodes of the new communicator connected to every other" "$tmp/err"; then
        echo "FAIL $name: the children by local index are not $nodes nodes of 1 over connections of their own"
        grep 'ccl_comm_split' "$tmp/err" | head | sed 's/^/    /'
    else
        echo "ok $name: split by node, by local index (new TCP connections), with no color, uneven; all-reduce, all-gather, broadcast on every child, every element right"
    fi
done
CCL_TIMEOUT_MS=20000 timeout -k 5 60 "$prog" splitskip 4 2 >"$tmp/out" 2>&1
if [ "$(grep -c '^rank [012]: split: a peer failed or left: .*rank 3 left the communicator' "$tmp/out")" -eq 3 ]; then
    echo "ok uniqueid/split-skip: rank 3 leaves without splitting: ranks 0-2 fail at once, naming it"
else
    echo "FAIL uniqueid/split-skip: ranks 0-2 do not all fail naming rank 3"
    show "$tmp/out"
fi

for rpn in 2 1; do
    name="uniqueid/p2p-$((4 / rpn))x$rpn"
    CCL_DEBUG=INFO CCL_DEBUG_SUBSYS=INIT timeout -k 5 60 "$prog" p2p 4 "$rpn" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    kept=$(grep -oE 'came before their recv \(at most [0-9]+ kept' "$tmp/err" | grep -oE '[0-9]+' | sort -n | tail -1)
    if [ $rc -ne 0 ] || [ "$(grep -c '^p2p .*: ok$' "$tmp/out")" -ne 33 ] || ! grep -q '^p2p wrong elements: 0$' "$tmp/out" ||
       [ "$(grep -c '^rank [0-9]*: wrong 0$' "$tmp/out")" -ne 4 ]; then
        echo "FAIL $name: exit $rc, not every case checked out"
        { grep -v ': ok$' "$tmp/out"; tail -5 "$tmp/err"; } | show /dev/stdin
    elif [ "$(grep -cE 'inter-node proxy: [1-9][0-9]* messages \([1-9][0-9]* bytes\) sent to, [1-9][0-9]* received' "$tmp/err")" -ne 4 ]; then
        echo "FAIL $name: not every rank's proxy carried traffic"
        grep -E 'proxy' "$tmp/err" | show /dev/stdin
    elif [ "${kept:-0}" -ne 8 ]; then
        echo "FAIL $name: the late receivers' proxies kept at most ${kept:-no} early messages of one sender at once, not the 8 credits"
        grep -E 'proxy' "$tmp/err" | show /dev/stdin
    else
        echo "ok $name: ring, exchanges (grouped and not) and 20-message groups on 3 counts x f32, i32 x 3 calls, 40 small and large messages to late receivers and from late senders over TCP, every element right; early messages of one sender kept at most 8 at once"
    fi
done

# The v-collectives over TCP: point-to-point messages across nodes (docs/multinode.md).
for rpn in 2 1; do
    name="uniqueid/v-$((4 / rpn))x$rpn"
    timeout -k 5 60 "$prog" v 4 "$rpn" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ] || [ "$(grep -c '^v .*: ok$' "$tmp/out")" -ne 9 ] || ! grep -q '^v wrong elements: 0$' "$tmp/out" ||
       [ "$(grep -c '^rank [0-9]*: wrong 0$' "$tmp/out")" -ne 4 ]; then
        echo "FAIL $name: exit $rc, not every case checked out"
        { grep -v ': ok$' "$tmp/out"; tail -5 "$tmp/err"; } | show /dev/stdin
    else
        echo "ok $name: allgatherv, alltoallv x f32, i32 x (out of place, in place) x 3 calls over TCP, uneven counts (0 to 262147), every segment and gap checked"
    fi
done

export CCL_TIMEOUT_MS=1500

# failing NAME WANT PATTERN MODE ARGS...: runs the program in MODE; ok when it exits 0 and
# WANT of its lines match PATTERN (and whatever test follows, on $tmp/out, passes).
failing() {
    local name=$1 want=$2 pattern=$3
    shift 3
    start=$(date +%s%N)
    timeout -k 5 60 "$prog" "$@" >"$tmp/out" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    named=$(grep -c "$pattern" "$tmp/out")
    [ $rc -eq 0 ] && [ "$named" -eq "$want" ] || { echo "FAIL uniqueid/$name: exit $rc, $named of $want ranks said so"; show "$tmp/out"; return 1; }
}

# Rank 3 never calls: the root names it to the others, within the timeout.
failing skip 3 '^rank [012]: init: a wait timed out.*rank 3 of 4 never connected to the root at .* within 1500 ms' skip 4 2 3 &&
    echo "ok uniqueid/skip: ranks 0, 1 and 2 fail within the timeout, the root naming rank 3"

# A stale id: the same address and port, another cookie.
failing cookie 3 '^rank [012]: init: .*rank 3 of 4 never connected to the root' cookie 4 2 3 &&
    if grep -q '^rank 3: init: invalid argument: .*the root at 127.0.0.1:[0-9]* refused rank 3 (.*): wrong cookie' "$tmp/out"; then
        echo "ok uniqueid/cookie: rank 3's stale id is refused for its cookie; the others name rank 3"
    else
        echo "FAIL uniqueid/cookie: rank 3 does not say its cookie was refused"
        show "$tmp/out"
    fi

# The root's process has ended.
failing noroot 2 '^rank [01]: init: .*cannot connect to the root at 127.0.0.1:[0-9]*: Connection refused' noroot 2 1 &&
    echo "ok uniqueid/noroot: both ranks fail, naming the root's address and the refusal"

# Rank 1's init fails after the mesh: the others hear of it at once, not at the timeout.
failing baddev 3 "^rank [023]: init: a peer failed or left: .*rank 1 (.*pid [0-9]*) gave up in the init: .*argument 'device' is -5" baddev 4 2 1 &&
    if [ "$ms" -lt 1500 ] && grep -q "^rank 1: init: invalid argument: .*argument 'device' is -5" "$tmp/out"; then
        echo "ok uniqueid/baddev: rank 1 refuses its device; ranks 0, 2 and 3 name rank 1 and why at once (${ms} ms)"
    else
        echo "FAIL uniqueid/baddev: ${ms} ms, or rank 1 does not name its device"
        show "$tmp/out"
    fi

# A rank killed while the others all-reduce (cases.h, run_kill_case): at once after its
# first call, and 300 ms later in the middle of one; as 2 nodes of 2 (its node-mate finds
# its process gone, the other node's ranks their connections to it failing), 4 nodes of 1
# (only the connections fail), 3 nodes of 2, 2 of 3, and 6 of 1 with rank 0 killed. Every
# survivor must fail within 5 s (the timeout is 20 s), its message naming the killed rank
# as gone, not a rank that stopped because of it (docs/multinode.md, "Failures").
for mode in kill killmid; do
    for shape in 4:2:3 4:1:3 6:2:3 6:3:4 6:1:0; do
        IFS=: read -r np rpn v <<<"$shape"
        name="uniqueid/$mode-$((np / rpn))x$rpn"
        CCL_TIMEOUT_MS=20000 timeout -k 5 60 "$prog" "$mode" "$np" "$rpn" "$v" >"$tmp/out" 2>&1
        rc=$?
        gone="rank $v (on node $((v / rpn)) |\(pid [0-9]+\) )is gone"
        named=$(grep -cE "^rank [0-9]+: a peer failed or left after [0-9]+ ms [^:]*: .*$gone" "$tmp/out")
        slowest=$(grep -oE '^rank [0-9]+: [^:]* after [0-9]+ ms' "$tmp/out" | awk '{ if ($(NF - 1) > m) m = $(NF - 1) } END { print m + 0 }')
        if [ $rc -eq 0 ] && [ "$named" -eq $((np - 1)) ] && [ "$slowest" -lt 5000 ]; then
            echo "ok $name: rank $v killed ($([ "$mode" = kill ] && echo "at once" || echo "300 ms into the calls")), the $((np - 1)) others fail within $slowest ms, each naming rank $v as gone"
        else
            echo "FAIL $name: exit $rc, $named of $((np - 1)) survivors name rank $v as gone, the slowest after $slowest ms"
            show "$tmp/out"
        fi
    done
done

failing badid 4 "^\(bad id\|nranks 0\|rank 2 of 2\|NULL id\): invalid argument: " badid &&
    if grep -q "^bad id: .*ccl_comm_init_rank_id: argument 'id' was not made by ccl_get_unique_id" "$tmp/out" &&
       grep -q "^nranks 0: .*argument 'nranks' is 0" "$tmp/out" &&
       grep -q "^rank 2 of 2: .*argument 'rank' is 2, outside 0..1" "$tmp/out" &&
       grep -q "^NULL id: .*ccl_get_unique_id: argument 'id' is NULL" "$tmp/out"; then
        echo "ok uniqueid/badid: a damaged id, nranks 0, rank 2 of 2 and a NULL id are refused, each named"
    else
        echo "FAIL uniqueid/badid: not every argument is named"
        show "$tmp/out"
    fi

# Where the root cannot listen.
bad=0
check_getid() { # ENV=VALUE, the message expected
    env "$1" timeout -k 5 30 "$prog" getid >"$tmp/out" 2>&1
    if ! grep -q "^ccl_get_unique_id: $2" "$tmp/out"; then
        echo "FAIL uniqueid/badaddr: with $1"
        show "$tmp/out"
        bad=1
    fi
}
check_getid CCL_BOOTSTRAP_ADDR=no-such-host.invalid "invalid argument: .*CCL_BOOTSTRAP_ADDR='no-such-host.invalid': cannot resolve 'no-such-host.invalid': "
check_getid CCL_BOOTSTRAP_ADDR=203.0.113.1 "system call failed: .*cannot listen on 203.0.113.1:0: Cannot assign requested address"
check_getid CCL_BOOTSTRAP_ADDR=127.0.0.1:99999 "invalid argument: .*'99999' is not a port"
check_getid CCL_SOCKET_IFNAME=nosuchif "invalid argument: .*CCL_SOCKET_IFNAME='nosuchif' admits no interface of this host"
check_getid CCL_BOOTSTRAP_ADDR=127.0.0.1 "success"
[ $bad -eq 0 ] && echo "ok uniqueid/badaddr: an unresolvable host, an address not this host's, a bad port, an unknown interface: each refused, named"
exit 0
