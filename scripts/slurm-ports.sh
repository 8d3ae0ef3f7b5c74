# Sourced by the private-Slurm scripts: slurm_ports prints a base port P such that P+1
# (slurmctld) and P+2 (slurmd) can both be bound now. It picks below the kernel's ephemeral
# range (net.ipv4.ip_local_port_range), where no outgoing connection or port-0 test server
# lands, and tries each candidate by binding it, so a daemon already listening there (another
# private Slurm, a server left by an earlier step) is skipped instead of making slurmctld die
# with "Address already in use" after it has daemonized.
slurm_ports() {
    local low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$low" -gt 12000 ] 2>/dev/null || low=32768
    local p
    for _ in $(seq 200); do
        p=$((10000 + RANDOM % (low - 10010)))
        if python3 - "$((p + 1))" "$((p + 2))" <<'PY' 2>/dev/null; then echo "$p"; return 0; fi
import socket, sys
held = []
for port in map(int, sys.argv[1:]):
    s = socket.socket()
    s.bind(("0.0.0.0", port))
    held.append(s)
PY
    done
    echo "slurm_ports: no two free ports below $low after 200 tries (python3 needed to test them)" >&2
    return 1
}
