/* The headers ibverbs-sys binds: the verbs, and the RDMA connection manager. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
