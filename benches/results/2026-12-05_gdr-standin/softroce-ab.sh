S=/mnt/host
MODE=${1:-single}
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
modprobe crc32_generic; modprobe rdma_rxe; modprobe ib_uverbs; modprobe veth
if [ "$MODE" = server ] || [ "$MODE" = client ]; then
  modprobe virtio_net
  sleep 1
  if [ "$MODE" = server ]; then me=1; else me=2; fi
  ip addr add 10.77.1.$me/24 dev eth0
  ip link set eth0 up
  NETDEV=eth0
  export RANKWIRE_RDMA_TWO_NODE=$MODE RANKWIRE_RDMA_PEER=10.77.1.1:47800
  sleep 2
else
  ip link add veth0 type veth peer name veth1
  ip addr add 10.77.0.1/24 dev veth0
  ip link set veth0 up; ip link set veth1 up
  NETDEV=veth0
fi
if ! rdma link add rxe0 type rxe netdev $NETDEV; then
  echo "RDMA-SUITE setup rc=1 (rdma link add failed)"
  exit 1
fi
rdma link show
for i in 0 1; do
  echo "rxe0 gid[$i] = $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)"
done
ulimit -l unlimited
cp -r "$S/base" /tmp/base; cp -r "$S/new" /tmp/new
export RANKWIRE_TRANSPORTS=rdma,tcp
for rep in 1 2 3; do
  for cfg in base new; do
    case $cfg in
      base) d=/tmp/base; mode=on-demand ;;
      new) d=/tmp/new; mode=on-demand ;;
    esac
    for m in latency bw; do
      echo "AB-BEGIN rep=$rep cfg=$cfg mode=$m"
      RANKWIRE_RDMA_CONNECT=$mode timeout 300 $d/rwrun -n 2 $d/rankwire-bench $m -i 400 --warmup 50 --max-size 262144
      echo "AB-END rc=$?"
    done
  done
done
