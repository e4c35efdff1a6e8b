/* The ABI check's NCCL consumer: built against the installed nccl.h and linked to the
 * installed libnccl.so.2 drop-in, then run with the padded libcollie underneath it (the
 * drop-in must not depend on libcollie's internals either). Two ranks as threads of one
 * process (ncclCommInitRank each) all-reduce host buffers. */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>

static ncclUniqueId id;

static void* runRank(void* arg) {
  int rank = (int)(size_t)arg;
  ncclComm_t comm;
  float data[64];
  for (int i = 0; i < 64; ++i) data[i] = (float)((rank + 1) * i);
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    fprintf(stderr, "nccl consumer rank %d: ncclCommInitRank: %s\n", rank, ncclGetLastError(NULL));
    return (void*)1;
  }
  if (ncclAllReduce(data, data, 64, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) {
    fprintf(stderr, "nccl consumer rank %d: all-reduce: %s\n", rank, ncclGetLastError(comm));
    return (void*)1;
  }
  for (int i = 0; i < 64; ++i) {
    if (data[i] != (float)(3 * i)) {
      fprintf(stderr, "nccl consumer rank %d: element %d is %g\n", rank, i, data[i]);
      return (void*)1;
    }
  }
  ncclCommDestroy(comm);
  return NULL;
}

int main(void) {
  pthread_t threads[2];
  void* failed[2] = {NULL, NULL};
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    fprintf(stderr, "nccl consumer: ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  for (int r = 0; r < 2; ++r) pthread_create(&threads[r], NULL, runRank, (void*)(size_t)r);
  for (int r = 0; r < 2; ++r) pthread_join(threads[r], &failed[r]);
  if (failed[0] != NULL || failed[1] != NULL) return 1;
  printf("nccl consumer ok\n");
  return 0;
}
