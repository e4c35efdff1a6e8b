/* Uses the installed C API: a one-rank communicator all-reduces four floats. */
#include <collie/collie.h>
#include <stdio.h>

int main(void) {
  collieUniqueId id;
  collieComm_t comm;
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  if (collieGetUniqueId(&id) != collieSuccess ||
      collieCommInitRank(&comm, 1, id, 0) != collieSuccess ||
      collieAllReduce(in, out, 4, collieFloat32, collieSum, comm) != collieSuccess) {
    fprintf(stderr, "consumer: %s\n", collieGetLastError());
    return 1;
  }
  collieCommDestroy(comm);
  for (int i = 0; i < 4; ++i) {
    if (out[i] != in[i]) return 2;
  }
  printf("consumer ok\n");
  return 0;
}
