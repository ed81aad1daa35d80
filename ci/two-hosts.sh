# ci/two-hosts.sh — the two-host half of ci/vm-run.sh, sourced by it when
# it is given --sync (cargo xtask's two-host runs: two VMs, one per host,
# joined by a virtual link, rxe0 on each).
#
# Both hosts see the directory $SYNC and meet there through empty files:
#   up.<i>               host i has rxe0 up (the run starts when both have)
#   pair<N>.ready        the server of pair step N listens
#   pair<N>.client_done  its client has ended
#   pair<N>.done.<i>     host i has recorded step N
#   finished.<i>         host i's vm-run.sh has ended (written by finish)
#   gone.<i>             host i's VM has ended (written by xtask on the host)
# Every wait is bounded, and ends at once when the peer is gone.
#
# Exports for the steps: HOST_INDEX (0: A, 1: B), HOST_NAME, PEER_IPV4.
#
# Step function a plan may call (records PASS/FAIL like ci/vm-run.sh's):
#   pair_step LABEL PORT SERVER_HOST SERVER CLIENT [EXPECT_SERVER [EXPECT_CLIENT]]
#       host SERVER_HOST runs `bash -c SERVER`; once PORT listens there (TCP
#       or RDMA CM; 0: 3 s after it started) the other host runs
#       `bash -c CLIENT`. Each
#       host records its own side: it passes if it exits 0 and its output
#       matches its EXPECT (an extended regular expression; empty: none).
#       The server sees PAIR_CLIENT_DONE, a file that exists once the
#       client has ended (for servers that serve until stopped).

PEER_INDEX=$((1 - HOST_INDEX))
NAMES=(A B)
HOST_NAME=${NAMES[$HOST_INDEX]} PEER_NAME=${NAMES[$PEER_INDEX]}
export HOST_INDEX HOST_NAME PEER_IPV4

# The peer will not come: its script or its whole VM has ended.
peer_gone() {
    [ -e "$SYNC/gone.$PEER_INDEX" ] || [ -e "$SYNC/finished.$PEER_INDEX" ]
}

# wait_for FILE SECS: until FILE exists; fails after SECS or once the peer
# is gone.
wait_for() {
    local f=$1 limit=$2 t0=$SECONDS
    until [ -e "$f" ]; do
        if peer_gone && [ ! -e "$f" ]; then
            echo "two-hosts: host $PEER_NAME has ended; not waiting for ${f##*/}"
            return 1
        fi
        if [ $((SECONDS - t0)) -ge "$limit" ]; then
            echo "two-hosts: gave up waiting for ${f##*/} after $limit s"
            return 1
        fi
        sleep 0.2
    done
}

# rendezvous NAME SECS: both hosts reach NAME (or this one gives up).
rendezvous() {
    : >"$SYNC/$1.$HOST_INDEX"
    wait_for "$SYNC/$1.$PEER_INDEX" "$2"
}

# Meets the peer once both have rxe0 up, and checks the link carries
# frames: the peer's address must resolve to its MAC (no ping in the guest;
# a UDP datagram to the discard port makes the kernel ask).
two_hosts_up() {
    {
        echo "HOST_INDEX=$HOST_INDEX"
        echo "PEER_IPV4=$PEER_IPV4"
    } >>"$OUT/rxe.env"
    echo "two-hosts: this is host $HOST_NAME ($RXE_IPV4 on $RXE_NETDEV), peer $PEER_NAME is $PEER_IPV4;" \
        "waiting up to $PEER_TIMEOUT s for its rxe0"
    local t0=$SECONDS
    rendezvous up "$PEER_TIMEOUT" || return 1
    echo "two-hosts: host $PEER_NAME is up (waited $((SECONDS - t0)) s)"
    t0=$SECONDS
    until ip neigh show "$PEER_IPV4" dev "$RXE_NETDEV" | grep -q lladdr; do
        if [ $((SECONDS - t0)) -ge 20 ]; then
            echo "two-hosts: $PEER_IPV4 does not answer ARP on $RXE_NETDEV after 20 s: the link is down"
            ip -br addr; ip neigh
            return 1
        fi
        (echo x >"/dev/udp/$PEER_IPV4/9") 2>/dev/null
        sleep 0.5
    done
    echo "two-hosts: link up: $(ip neigh show "$PEER_IPV4" dev "$RXE_NETDEV")"
}

# listening PORT: a TCP socket or an RDMA CM id (rping) listens on PORT.
listening() {
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . ||
        rdma resource show cm_id 2>/dev/null | grep LISTEN | grep -Eq ":$1( |$)"
}

PAIR_N=0
# Lines of a failed step's output kept in $OUT/failed-steps.txt.
FAILED_TAIL=15

pair_step() {
    local label=$1 port=$2 server_host=$3 server=$4 client=$5
    local expect_server=${6:-} expect_client=${7:-}
    PAIR_N=$((PAIR_N + 1))
    local key=$SYNC/pair$PAIR_N role cmd expect rc
    if [ "$server_host" = "$HOST_INDEX" ]; then
        role=server cmd=$server expect=$expect_server
    else
        role=client cmd=$client expect=$expect_client
    fi
    # Output goes to a file first, then to the console with its role in
    # front: whole, in order, and checkable against EXPECT.
    local log=$OUT/pair$PAIR_N.$role.log
    echo
    echo "---- step: $label ($role on host $HOST_NAME)"
    echo "\$ [$role] $cmd"
    local t0=$SECONDS
    if [ "$role" = server ]; then
        PAIR_CLIENT_DONE=$key.client_done timeout -k 5 "$STEP_TIMEOUT" bash -c "$cmd" >"$log" 2>&1 &
        local spid=$!
        if [ "$port" -gt 0 ]; then
            for _ in $(seq 1 150); do
                listening "$port" && break
                kill -0 "$spid" 2>/dev/null || break
                sleep 0.2
            done
        else
            sleep "${PAIR_START_DELAY:-3}"
        fi
        : >"$key.ready"
        wait_for "$key.client_done" $((STEP_TIMEOUT + 30))
        # The server should end on its own once its client has.
        rc=""
        for _ in $(seq 1 150); do
            if ! kill -0 "$spid" 2>/dev/null; then wait "$spid"; rc=$?; break; fi
            sleep 0.2
        done
        if [ -z "$rc" ]; then
            echo "[server] still running 30 s after the client ended; killing it"
            kill "$spid" 2>/dev/null; wait "$spid"; rc=124
        fi
    else
        if wait_for "$key.ready" "$STEP_TIMEOUT"; then
            timeout -k 5 "$STEP_TIMEOUT" bash -c "$cmd" >"$log" 2>&1
            rc=$?
        else
            echo "[client] not run: the server on host $PEER_NAME never became ready"
            : >"$log"
            rc=125
        fi
        : >"$key.client_done"
    fi
    sed "s/^/[$role] /" "$log"
    echo "$role exit $rc"
    if [ "$rc" = 0 ] && [ -n "$expect" ] && ! grep -Eq -- "$expect" "$log"; then
        echo "---- the $role's output does not match /$expect/"
        rc=1
    fi
    record "$label" "$rc" $((SECONDS - t0))
    # A failed step's last lines, for test-rxe's summary (the console's
    # copy may be far above the end of a long run's output).
    if [ "$rc" != 0 ]; then
        {
            echo "$label ($role on host $HOST_NAME, exit $rc), its last lines:"
            tail -n "$FAILED_TAIL" "$log"
        } >>"$OUT/failed-steps.txt"
    fi
    # A fault step leaves no qdisc and no NIC down behind, even if killed.
    faults_clear
    # Stay in step: both hosts end step N before either starts N + 1.
    : >"$key.done.$HOST_INDEX"
    wait_for "$key.done.$PEER_INDEX" 60 || true
    return 0
}

# --- faults on the link (test-rxe's hostile-network steps) -----------------
# Helpers a pair step's command may call (exported: steps run `bash -c`).
# Each prints what it did and the time it took, and leaves the link clean.

# faults_time START: seconds since START (an $EPOCHREALTIME), two decimals.
faults_time() {
    awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'
}

# faults_clear: no qdisc on the link NIC, the NIC up at MTU 1500 (after
# every pair step).
faults_clear() {
    tc qdisc del dev "$RXE_NETDEV" root 2>/dev/null
    tc qdisc del dev "$RXE_NETDEV" ingress 2>/dev/null
    tc qdisc del dev "$RXE_NETDEV" clsact 2>/dev/null
    ip link set dev "$RXE_NETDEV" mtu 1500 2>/dev/null
    ip link set dev "$RXE_NETDEV" up 2>/dev/null
    return 0
}

# with_mtu MTU CMD...: runs CMD with this host's link NIC at MTU (rxe0's
# active MTU follows it: 1500 gives 1024, 4200 gives 4096), then back to
# 1500.
with_mtu() {
    local mtu=$1 rc
    shift
    ip link set dev "$RXE_NETDEV" mtu "$mtu" || return 1
    sleep 1
    echo "faults: $RXE_NETDEV mtu $mtu; rxe0 $(ibv_devinfo -d "$RXE_DEVICE" | grep -m1 active_mtu | tr -s ' \t' ' ')"
    "$@"
    rc=$?
    ip link set dev "$RXE_NETDEV" mtu 1500
    return "$rc"
}

# under_qdisc CMD...: runs CMD over the root qdisc just set up on this
# host's link NIC (its egress), then removes it, saying what it was and
# what CMD did under it.
under_qdisc() {
    local what t0 rc
    what=$(tc qdisc show dev "$RXE_NETDEV" | grep -m1 netem)
    echo "faults: $what"
    t0=$EPOCHREALTIME
    "$@"
    rc=$?
    tc qdisc del dev "$RXE_NETDEV" root
    echo "faults: exit $rc after $(faults_time "$t0") s under ${what#qdisc }"
    return "$rc"
}

# netem 'NETEM ARGS' CMD...: runs CMD with `tc qdisc add ... root netem
# NETEM ARGS` on this host's link NIC (its egress), removed afterwards.
netem() {
    local spec=$1
    shift
    modprobe sch_netem 2>/dev/null
    # shellcheck disable=SC2086 # the netem arguments are words
    tc qdisc replace dev "$RXE_NETDEV" root netem $spec || return 1
    under_qdisc "$@"
}

# RTU_MATCH: tc u32 selectors for an RDMA CM ready-to-use message (RTU):
# RoCE v2 (UDP port 4791) MADs whose attribute ID (offset 64 from the IP
# header: IP 20, UDP 8, BTH 12, DETH 8, then 16 of the MAD header) is
# 0x0014.
export RTU_MATCH="match ip protocol 17 0xff match ip dport 4791 0xffff match u16 0x0014 0xffff at 64"

# netem_keeps_rtus 'NETEM ARGS' CMD...: as `netem`, but the RTUs this host
# sends skip the netem (a prio qdisc's first band takes them, netem sits
# on the second): the peer's `rtu_lost` then always has its RTUs to drop.
netem_keeps_rtus() {
    local spec=$1
    shift
    modprobe sch_netem 2>/dev/null
    modprobe sch_prio 2>/dev/null
    modprobe cls_u32 2>/dev/null
    tc qdisc replace dev "$RXE_NETDEV" root handle 1: prio bands 2 \
        priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 || return 1
    # shellcheck disable=SC2086 # the netem arguments and RTU_MATCH are words
    tc qdisc add dev "$RXE_NETDEV" parent 1:2 handle 20: netem $spec &&
        tc filter add dev "$RXE_NETDEV" parent 1: protocol ip prio 1 u32 \
            $RTU_MATCH flowid 1:1 || { tc qdisc del dev "$RXE_NETDEV" root; return 1; }
    echo "faults: RTUs sent skip the netem below"
    under_qdisc "$@"
}

# rtu_lost N CMD...: runs CMD while this host drops the first N RDMA CM
# ready-to-use messages (RTUs) it receives: a connection it accepts then
# reaches ESTABLISHED only when its receives take the requester's first
# message (rdma_notify) or the RTU that answers the accept's retransmission
# (about 4 s later), while the requester, connected, may already send. An
# ingress filter drops RTUs (RTU_MATCH); a watcher removes it once it has
# dropped N.
# Fails if CMD does, or if no RTU came to drop (the step would then test
# nothing). The peer runs its side under `netem_keeps_rtus`: a lossy link
# that took the RTU before the filter saw it would leave nothing to drop.
rtu_drops() {
    tc -s filter show dev "$RXE_NETDEV" parent ffff: 2>/dev/null |
        grep -Eo 'dropped [0-9]+' | head -1 | cut -d' ' -f2
}
rtu_lost() {
    local n=$1 rc watcher seen t0=$EPOCHREALTIME dropped
    shift
    seen=$(mktemp)
    modprobe sch_ingress 2>/dev/null
    modprobe cls_u32 2>/dev/null
    modprobe act_gact 2>/dev/null
    tc qdisc add dev "$RXE_NETDEV" ingress || return 1
    # shellcheck disable=SC2086 # RTU_MATCH is words
    tc filter add dev "$RXE_NETDEV" parent ffff: protocol ip prio 1 u32 \
        $RTU_MATCH action drop || return 1
    # The watcher records the count before it removes the filter: killed
    # at any point, either the record or the filter is there to read (a
    # record written after the removal was lost when CMD ended within a
    # second of the drop, and a step that had dropped its RTU failed).
    (
        local d
        while d=$(rtu_drops); [ "${d:-0}" -lt "$n" ]; do sleep 0.1; done
        echo "$d" >"$seen"
        tc qdisc del dev "$RXE_NETDEV" ingress
        echo "faults: dropped $n RTUs, the last at $(faults_time "$t0") s"
    ) &
    watcher=$!
    "$@"
    rc=$?
    kill "$watcher" 2>/dev/null
    wait "$watcher" 2>/dev/null
    dropped=$(cat "$seen")
    if [ -z "$dropped" ]; then
        dropped=$(rtu_drops)
        if [ "${dropped:-0}" -ge "$n" ]; then
            echo "faults: dropped $n RTUs, the last as the command ended"
        else
            echo "faults: dropped ${dropped:-0} of $n RTUs"
        fi
    fi
    tc qdisc del dev "$RXE_NETDEV" ingress 2>/dev/null
    if [ "${dropped:-0}" -lt 1 ]; then
        echo "faults: no RTU arrived to drop"
        [ "$rc" = 0 ] && rc=1
    fi
    rm -f "$seen"
    return "$rc"
}

# link_cut MODE SECS CMD...: runs CMD; once it prints `remote address` (the
# pingpongs do as their transfer starts; CUT_AFTER, an extended regular
# expression, names another line) and half a second more, cuts this
# host's link for SECS seconds or until CMD ends: MODE `blackhole` drops
# every frame it sends (netem loss 100%: a dead path), `down` is `ip link
# set down` (rxe then fails sends at once with a local QP error).
link_cut() {
    local mode=$1 secs=$2 out pid t0 end rc
    shift 2
    [ "$mode" = down ] || modprobe sch_netem 2>/dev/null
    out=$(mktemp)
    "$@" >"$out" 2>&1 &
    pid=$!
    until grep -Eq "${CUT_AFTER:-remote address}" "$out" || ! running "$pid"; do sleep 0.1; done
    sleep 0.5
    running "$pid" || echo "faults: the program ended before the cut"
    if [ "$mode" = down ]; then
        ip link set dev "$RXE_NETDEV" down
    else
        tc qdisc replace dev "$RXE_NETDEV" root netem loss 100%
    fi
    t0=$EPOCHREALTIME
    # By the clock: under TCG a `sleep 0.1` round takes far longer.
    end=$((${t0/./} + secs * 1000000))
    while [ "${EPOCHREALTIME/./}" -lt "$end" ] && running "$pid"; do
        sleep 0.1
    done
    local dropped
    dropped=$(tc -s qdisc show dev "$RXE_NETDEV" | awk '/dropped/ { sub(/,/, "", $7); print $7; exit }')
    faults_clear
    echo "faults: link cut ($mode) for $(faults_time "$t0") s${dropped:+, $dropped frames dropped}"
    wait "$pid"
    rc=$?
    cat "$out"
    rm -f "$out"
    echo "faults: exit $rc, $(faults_time "$t0") s after the cut"
    return "$rc"
}

# running PID: the process runs (not ended, not a zombie waiting for wait).
running() {
    [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat"
}

# fails_within SECS CMD...: CMD must fail (non-zero exit) within SECS s.
fails_within() {
    local bound=$1 t0 rc took
    shift
    t0=$EPOCHREALTIME
    "$@"
    rc=$?
    took=$(faults_time "$t0")
    echo "faults: exit $rc after $took s (must fail within $bound s)"
    [ "$rc" != 0 ] && awk -v t="$took" -v b="$bound" 'BEGIN { exit !(t <= b) }'
}

export -f faults_time faults_clear with_mtu under_qdisc netem netem_keeps_rtus rtu_drops rtu_lost link_cut running fails_within
