#!/usr/bin/env bash
# ci/vm-run.sh — bring up a soft-RoCE (rxe) device, then run a plan on it.
#
# `cargo xtask test-rxe | demo | bench | vm` write a plan (a bash fragment
# calling the step functions below; built in Rust with xtask's `rxe::Plan`)
# to target/xtask/<task>/<pid>/plan.sh and run this script either inside the
# qemu guest booted by vng (VM path) or directly on a host whose kernel has
# rdma_rxe (native path, as root). `target/xtask/<task>/last` names the
# newest run; its output.log holds everything the run printed.
#
# usage: vm-run.sh --plan FILE --out DIR [--netdev IF|auto|virtio]
#                  [--device NAME] [--step-timeout SECS] [--cleanup]
#
#   --plan FILE         bash fragment to source once the device is up
#   --out DIR           writable directory for results:
#                         steps.tsv  one line per step: PASS|FAIL, exit code, seconds, label
#                         rxe.env    what was brought up (device, netdev, GID index, ...)
#                         status     overall exit status, written last
#   --netdev IF|auto|virtio
#                       network interface to attach rxe to. auto: the default
#                       route's interface, else lo. virtio (the VM): the guest's
#                       virtio-net NIC, normally eth0 with 10.0.2.15 from DHCP.
#   --device NAME       rxe device name (default rxe0); reused if it exists
#   --step-timeout S    per-step time limit (default 600)
#   --cleanup           delete the rxe device at exit if this script created it
#
# Two hosts (two VMs joined by a link; see ci/two-hosts.sh):
#   --link-ipv4 A/N     with --netdev virtio: give the NIC this static address
#                       (no DHCP; the link has no router)
#   --host-index I      this host's index (0: A, 1: B)
#   --peer-ipv4 ADDR    the other host's address on the link
#   --sync DIR          directory both hosts see, for their rendezvous files
#   --peer-timeout S    how long to wait for the other host to bring up rxe
#
# Step functions a plan may call (all record PASS/FAIL and carry on):
#   say TEXT...                          print explanatory text (not a step)
#   step LABEL CMD [ARG...]              run a command
#   sh_step LABEL SCRIPT                 run `bash -c SCRIPT`
#   test_binary LABEL DIR EXE [ARG...]   run a Rust test binary as cargo would:
#                                        cwd and CARGO_MANIFEST_DIR = DIR, plus
#                                        RDMA_TEST_REQUIRE_DEVICE=1, RDMA_TEST_DEVICE
#   server_client LABEL PORT SERVER CLIENT
#                                        start `bash -c SERVER` in the background,
#                                        wait until TCP PORT listens (0: sleep 2 s),
#                                        run `bash -c CLIENT`; both must exit 0
#
# Every step sees RXE_DEVICE, RXE_NETDEV, RXE_PORT, RXE_GID_INDEX (the RoCE v2
# IPv4 GID), RXE_IPV4 and XTASK_OUT (the run's writable results directory),
# runs with `ulimit -l unlimited`, stdout+stderr merged.

set -uo pipefail
exec 2>&1

PLAN="" OUT="" NETDEV="auto" DEV="rxe0" STEP_TIMEOUT=600 CLEANUP=0
LINK_IPV4="" HOST_INDEX="" PEER_IPV4="" SYNC="" PEER_TIMEOUT=300
while [ $# -gt 0 ]; do
    case "$1" in
        --plan) PLAN=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --netdev) NETDEV=$2; shift 2 ;;
        --device) DEV=$2; shift 2 ;;
        --step-timeout) STEP_TIMEOUT=$2; shift 2 ;;
        --cleanup) CLEANUP=1; shift ;;
        --link-ipv4) LINK_IPV4=$2; shift 2 ;;
        --host-index) HOST_INDEX=$2; shift 2 ;;
        --peer-ipv4) PEER_IPV4=$2; shift 2 ;;
        --sync) SYNC=$2; shift 2 ;;
        --peer-timeout) PEER_TIMEOUT=$2; shift 2 ;;
        *) echo "vm-run: unknown argument: $1"; exit 2 ;;
    esac
done
if [ -z "$PLAN" ] || [ -z "$OUT" ]; then
    echo "vm-run: --plan and --out are required"; exit 2
fi
mkdir -p "$OUT" || exit 2
: >"$OUT/steps.tsv"
rm -f "$OUT/status"

finish() {
    echo "$1" >"$OUT/status"
    # Two hosts: a peer waiting for this one stops waiting.
    [ -n "$SYNC" ] && [ -n "$HOST_INDEX" ] && : >"$SYNC/finished.$HOST_INDEX"
    sync
    exit "$1"
}

die() {
    echo "vm-run: error: $*"
    finish 2
}

# --- bring-up ---------------------------------------------------------------

echo "vm-run: kernel $(uname -r) on $(hostname), uid $(id -u)"

if [ ! -d /sys/module/rdma_rxe ]; then
    echo "\$ modprobe rdma_rxe"
    modprobe rdma_rxe || die "modprobe rdma_rxe failed (kernel without CONFIG_RDMA_RXE?)"
fi

if [ "$NETDEV" = auto ]; then
    NETDEV=$(ip -o route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
    [ -n "$NETDEV" ] || NETDEV=lo
fi

has_ipv4() {
    ip -o -4 addr show dev "$1" 2>/dev/null | grep -q inet
}

diagnose() {
    echo "vm-run: network state:"
    ip -br link; ip -br addr
    echo "vm-run: last kernel messages:"
    dmesg 2>/dev/null | tail -20
}

CREATED=0
if rdma link show "$DEV/1" >/dev/null 2>&1; then
    echo "vm-run: $DEV already exists, reusing it"
    NETDEV=$(rdma link show "$DEV/1" | awk '{for (i = 1; i < NF; i++) if ($i == "netdev") print $(i + 1)}')
else
    if [ "$NETDEV" = virtio ]; then
        # The qemu guest's NIC (vng --network user: slirp, 10.0.2.15/24 by
        # DHCP). virtme-ng-init names it eth0 and runs udhcpc, but under slow
        # emulation udev may rename it (enp0s*) afterwards and leave it down
        # without an address; find it by driver and, if DHCP did not configure
        # it within 20 s, give it slirp's fixed address ourselves.
        NETDEV=""
        t0=$SECONDS
        while [ -z "$NETDEV" ] && [ $((SECONDS - t0)) -lt 20 ]; do
            for d in /sys/bus/virtio/drivers/virtio_net/virtio*/net/*; do
                [ -e "$d" ] && NETDEV=${d##*/} && break
            done
            [ -n "$NETDEV" ] || sleep 0.5
        done
        if [ -z "$NETDEV" ]; then
            echo "vm-run: warning: no virtio-net interface in the guest"
            diagnose
            NETDEV=lo
        fi
        if [ -n "$LINK_IPV4" ] && [ "$NETDEV" != lo ]; then
            # Two hosts: a point-to-point link, static addresses, no DHCP.
            echo "\$ ip addr add $LINK_IPV4 dev $NETDEV; ip link set $NETDEV up"
            ip addr add "$LINK_IPV4" dev "$NETDEV" || die "cannot give $NETDEV the address $LINK_IPV4"
            ip link set "$NETDEV" up || die "cannot bring $NETDEV up"
        fi
        # While the NIC is up, udhcpc may still be at work: wait up to 20 s.
        # A NIC that is down (renamed by udev) will not get a lease at all.
        t0=$SECONDS
        until has_ipv4 "$NETDEV" || [ $((SECONDS - t0)) -ge 20 ]; do
            ip -o link show dev "$NETDEV" 2>/dev/null | grep -q '[<,]UP[,>]' || break
            sleep 0.5
        done
        if ! has_ipv4 "$NETDEV"; then
            echo "vm-run: $NETDEV has no address from DHCP; configuring slirp's 10.0.2.15/24"
            diagnose
            ip link set "$NETDEV" up
            ip addr add 10.0.2.15/24 dev "$NETDEV"
            ip route add default via 10.0.2.2 dev "$NETDEV" 2>/dev/null || true
        fi
    fi
    # Wait for the netdev's IPv4 address (the GID rxe uses), up to 30 s of
    # wall time however slow emulation is; else fall back to lo.
    t0=$SECONDS
    until has_ipv4 "$NETDEV"; do
        if [ $((SECONDS - t0)) -ge 30 ]; then
            echo "vm-run: warning: $NETDEV has no IPv4 address after 30 s"
            diagnose
            if [ "$NETDEV" != lo ]; then
                echo "vm-run: falling back to netdev lo"
                NETDEV=lo
                ip link set lo up 2>/dev/null || true
                continue
            fi
            break
        fi
        ip link set "$NETDEV" up 2>/dev/null || true
        sleep 0.5
    done
    echo "\$ rdma link add $DEV type rxe netdev $NETDEV"
    for try in 1 2 3 4 5; do
        rdma link add "$DEV" type rxe netdev "$NETDEV" && CREATED=1 && break
        echo "vm-run: rdma link add failed (attempt $try of 5); retrying in 1 s"
        sleep 1
    done
    if [ "$CREATED" != 1 ]; then
        diagnose
        die "rdma link add $DEV type rxe netdev $NETDEV failed"
    fi
fi
if [ "$CLEANUP" = 1 ] && [ "$CREATED" = 1 ]; then
    trap 'echo "\$ rdma link delete $DEV"; rdma link delete "$DEV"' EXIT
fi

# The port goes ACTIVE once the netdev is up; poll for up to 20 s.
active=0
t0=$SECONDS
while [ $((SECONDS - t0)) -lt 20 ]; do
    if rdma link show "$DEV/1" 2>/dev/null | grep -q 'state ACTIVE'; then active=1; break; fi
    sleep 0.2
done
rdma link show "$DEV/1"
if [ "$active" != 1 ]; then
    diagnose
    die "$DEV port 1 did not become ACTIVE within 20 s"
fi
ibv_devices | grep -qw "$DEV" || die "ibv_devices does not list $DEV (libibverbs or the rxe provider missing?)"

# The RoCE v2 GID carrying the netdev's IPv4 address (::ffff:a.b.c.d).
GID_INDEX=""
ports=/sys/class/infiniband/$DEV/ports/1
for g in "$ports"/gids/*; do
    i=${g##*/}
    gid=$(cat "$g" 2>/dev/null) || continue
    type=$(cat "$ports/gid_attrs/types/$i" 2>/dev/null) || continue
    case "$gid" in
        0000:0000:0000:0000:0000:ffff:*)
            if [ "$type" = "RoCE v2" ]; then GID_INDEX=$i; break; fi ;;
    esac
done
[ -n "$GID_INDEX" ] || die "$DEV has no RoCE v2 IPv4 GID (does $NETDEV have an IPv4 address?)"
IPV4=$(ip -o -4 addr show dev "$NETDEV" | awk '{sub(/\/.*/, "", $4); print $4; exit}')

ulimit -l unlimited || echo "vm-run: warning: cannot raise RLIMIT_MEMLOCK (not root?)"

export RXE_DEVICE=$DEV RXE_NETDEV=$NETDEV RXE_PORT=1 RXE_GID_INDEX=$GID_INDEX RXE_IPV4=$IPV4
# The run's writable results directory, for steps that keep files.
export XTASK_OUT=$OUT
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}
export TMPDIR=${TMPDIR:-/tmp}
echo "vm-run: $DEV on $NETDEV ($IPV4) port 1 ACTIVE, RoCE v2 GID index $GID_INDEX, memlock $(ulimit -l)"
{
    echo "RXE_DEVICE=$DEV"
    echo "RXE_NETDEV=$NETDEV"
    echo "RXE_GID_INDEX=$GID_INDEX"
    echo "RXE_IPV4=$IPV4"
    echo "KERNEL=$(uname -r)"
} >"$OUT/rxe.env"

if [ -n "$SYNC" ]; then
    # shellcheck source=ci/two-hosts.sh
    source "$(dirname "${BASH_SOURCE[0]}")/two-hosts.sh" || die "cannot read two-hosts.sh"
    two_hosts_up || die "the two hosts did not meet"
fi

# --- steps ------------------------------------------------------------------

NSTEPS=0 NFAIL=0 FAILED=()

say() {
    echo
    printf '%s\n' "$@"
}

# record LABEL RC SECONDS
record() {
    local verdict=PASS
    if [ "$2" != 0 ]; then
        verdict=FAIL NFAIL=$((NFAIL + 1)); FAILED+=("$1")
    fi
    NSTEPS=$((NSTEPS + 1))
    printf '%s\t%s\t%s\t%s\n' "$verdict" "$2" "$3" "$1" >>"$OUT/steps.tsv"
    local why=""
    [ "$2" = 124 ] && why=", timed out after ${STEP_TIMEOUT} s"
    echo "---- $verdict (exit $2$why, $3 s): $1"
}

step() {
    local label=$1; shift
    echo
    echo "---- step: $label"
    if [ -n "${SHOW:-}" ]; then echo "\$ $SHOW"; else echo "\$ $(printf '%q ' "$@")"; fi
    local t0=$SECONDS
    timeout --foreground -k 10 "$STEP_TIMEOUT" "$@"
    record "$label" $? $((SECONDS - t0))
    return 0
}

sh_step() {
    SHOW=$2 step "$1" bash -c "$2"
}

test_binary() {
    local label=$1 dir=$2; shift 2
    step "$label" env -C "$dir" CARGO_MANIFEST_DIR="$dir" \
        RDMA_TEST_REQUIRE_DEVICE=1 RDMA_TEST_DEVICE="$DEV" "$@"
}

server_client() {
    local label=$1 port=$2 server=$3 client=$4
    echo
    echo "---- step: $label"
    echo "\$ [server] $server"
    local t0=$SECONDS
    timeout -k 5 "$STEP_TIMEOUT" bash -c "$server" > >(sed -u 's/^/[server] /') 2>&1 &
    local spid=$!
    if [ "$port" -gt 0 ]; then
        for _ in $(seq 1 150); do
            ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
            kill -0 "$spid" 2>/dev/null || break
            sleep 0.2
        done
    else
        sleep 2
    fi
    echo "\$ [client] $client"
    timeout -k 5 "$STEP_TIMEOUT" bash -c "$client" > >(sed -u 's/^/[client] /') 2>&1
    local crc=$?
    # The server should finish on its own once the client is done.
    local srv_rc=""
    for _ in $(seq 1 150); do
        if ! kill -0 "$spid" 2>/dev/null; then wait "$spid"; srv_rc=$?; break; fi
        sleep 0.2
    done
    if [ -z "$srv_rc" ]; then
        echo "[server] still running 30 s after the client finished; killing it"
        kill "$spid" 2>/dev/null; wait "$spid"; srv_rc=124
    fi
    sleep 0.1 # let the sed prefixes flush
    echo "server exit $srv_rc, client exit $crc"
    local rc=0
    [ "$crc" != 0 ] && rc=$crc
    [ "$srv_rc" != 0 ] && [ "$rc" = 0 ] && rc=$srv_rc
    record "$label" "$rc" $((SECONDS - t0))
    return 0
}

# shellcheck source=/dev/null
if ! source "$PLAN"; then
    echo "vm-run: error: the plan $PLAN did not run to its end"
    NFAIL=$((NFAIL + 1)); FAILED+=("plan script")
fi

echo
echo "vm-run: $NSTEPS steps, $((NSTEPS - NFAIL)) passed, $NFAIL failed"
for f in "${FAILED[@]+"${FAILED[@]}"}"; do echo "vm-run:   FAILED: $f"; done
if [ "$NFAIL" = 0 ]; then finish 0; else finish 1; fi
