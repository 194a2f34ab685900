#!/bin/bash | |
#SBATCH --partition=gpu | |
#SBATCH --job-name=gputest | |
#SBATCH --nodes 1 | |
#SBATCH --ntasks-per-node 8 | |
#SBATCH --cpus-per-gpu=6 | |
#SBATCH --gres=gpu:8 | |
#SBATCH --nodelist gpu-st-p4d-24xlarge-42 | |
#SBATCH --output=%x_%j.out | |
#SBATCH --open-mode=append | |
#SBATCH --exclusive | |
#SBATCH --comment neox | |
export LD_LIBRARY_PATH=/opt/amazon/openmpi/lib64:/opt/amazon/efa/lib64 | |
module load cuda/11.6 | |
export PATH=/opt/amazon/efa/bin:$PATH | |
export FI_EFA_FORK_SAFE=1 | |
export FI_LOG_LEVEL=1 | |
export FI_EFA_USE_DEVICE_RDMA=1 # use for p4dn | |
export NCCL_DEBUG=info | |
export OMPI_MCA_mtl_base_verbose=1 | |
export FI_EFA_ENABLE_SHM_TRANSFER=0 | |
export FI_PROVIDER=efa | |
export FI_EFA_TX_MIN_CREDITS=64 | |
export EXP_NCCL_ALLREDUCE_IB_LOOPBACK_BW=5 | |
ldd `which all_reduce_perf` | |
echo $LD_LIBRARY_PATH | |
echo $PATH | |
MPI_ARGS="-np 8 --map-by ppr:8:node -bind-to numa --allow-run-as-root" | |
