                       /usr/mpi/gcc/openmpi-4.1.7a1/bin/mpirun  \
                       --show-progress \
                       -mca plm_rsh_force_rsh 1 \
                       -v  -np 2  \
                       -H 10.248.0.10,10.248.0.12 \
                       -x NCCL_SOCKET_IFNAME=ens9f0np0  \
                       -x NCCL_IB_GID_INDEX=3 \
                       -x NCCL_IB_DISABLE=0 \
                       -x NCCL_IB_CUDA_SUPPORT=1 \
                       -x NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1 \
                       -x CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7  \
                      ./build/all_reduce_perf -b 128M -e 128M -f 2 -g 8 -t 1 -c 0 
