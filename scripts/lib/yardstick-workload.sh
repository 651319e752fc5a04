# Sourced by the CPU-per-operation scripts: how the yardstick (`bench-vs-memcached`)
# drives memcaslap for one of its workloads, so that these scripts load a server as it does.

# Sets `concurrency` (memcaslap's connections) and `extra` (its other flags) for WORKLOAD.
yardstick_load() { # WORKLOAD
    case $1 in
        seed001-1k-10k-sets) concurrency=100 ;;
        many-connections) concurrency=1000 ;;
        *) concurrency=50 ;;
    esac
    extra=()
    case $1 in
        multiget-10) extra=(-d 10) ;;
        binary-protocol) extra=(-B) ;;
    esac
}

# Waits (up to 5 s) until something accepts connections on 127.0.0.1:PORT.
wait_for_port() { # PORT
    for _ in $(seq 50); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), timeout=1)" \
            2>/dev/null && return 0
        sleep 0.1
    done
}
