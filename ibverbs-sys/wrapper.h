/* The one header ibverbs-sys binds. */
#include <infiniband/verbs.h>
