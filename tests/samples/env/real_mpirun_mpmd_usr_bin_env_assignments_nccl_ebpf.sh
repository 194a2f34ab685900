mpirun --oversubscribe --tag-output \
  -np 1 /usr/bin/env \
    LD_LIBRARY_PATH=/home/yunwei37/workspace/nccl-eBPF/nccl/build/lib \
    NCCL_TESTS_DEVICE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
    NCCL_NET=Socket NCCL_HOSTID=st-exp1b-rank0 \
    NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=1 \
    /home/yunwei37/workspace/nccl-eBPF/nccl-tests/build/all_reduce_perf_mpi \
      -b 1048576 -e 134217728 -f 2 -g 1 -n 50 -w 10 \
  : \
  -np 1 /usr/bin/env \
    LD_LIBRARY_PATH=/home/yunwei37/workspace/nccl-eBPF/nccl/build/lib \
    NCCL_TESTS_DEVICE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
    NCCL_NET=Socket NCCL_HOSTID=st-exp1b-rank1 \
    NCCL_SOCKET_NTHREADS=4 NCCL_NSOCKS_PERTHREAD=1 \
    /home/yunwei37/workspace/nccl-eBPF/nccl-tests/build/all_reduce_perf_mpi \
      -b 1048576 -e 134217728 -f 2 -g 1 -n 50 -w 10
