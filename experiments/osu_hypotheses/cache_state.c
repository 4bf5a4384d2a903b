/* Diagnostic (issue 18 item 2): why an np-2 allgather is slower than a ping-pong above the CMA threshold.
 *
 * Usage: mpicc -O2 -o cache_state cache_state.c && mpirun -np 2 ./cache_state
 * Per size 4 KiB..1 MiB, the 3rd-fastest of 30 batches (us per call) of:
 *   pingpong        half a round trip, unchanged send buffer (osu_latency)
 *   sendrecv        MPI_Sendrecv both ways at once, unchanged send buffer
 *   allgather       MPI_Allgather
 *   dirty-sendrecv  memcpy the own block into recvbuf, then MPI_Sendrecv from there (what MPICH's
 *                   recursive-doubling and ring allgathers do at np 2)
 * dirty-sendrecv tracks allgather while sendrecv tracks pingpong: the cost is the cache state of the
 * block just written, not the two directions at once.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return (x>y)-(x<y);}
int main(int c,char**v){MPI_Init(&c,&v);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);int p=1-r;
 size_t M=1<<20; char*s=malloc(2*M),*d=malloc(2*M); memset(s,1,2*M); memset(d,0,2*M);
 for(size_t m=4096;m<=M;m*=2){ int it=m>8192?20:100; double best[4]; const char *nm[4]={"pingpong","sendrecv","allgather","dirty-sendrecv"};
  for(int mode=0;mode<4;mode++){ double b[30]; for(int k=0;k<30;k++){ MPI_Barrier(MPI_COMM_WORLD); double t=MPI_Wtime();
   for(int i=0;i<it;i++){ if(mode==0){ if(r==0){MPI_Send(s,m,MPI_CHAR,1,1,MPI_COMM_WORLD);MPI_Recv(d,m,MPI_CHAR,1,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);} else {MPI_Recv(d,m,MPI_CHAR,0,1,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(s,m,MPI_CHAR,0,1,MPI_COMM_WORLD);} }
    else if(mode==1) MPI_Sendrecv(s,m,MPI_CHAR,p,2,d+p*m,m,MPI_CHAR,p,2,MPI_COMM_WORLD,MPI_STATUS_IGNORE);
    else if(mode==2) MPI_Allgather(s,m,MPI_CHAR,d,m,MPI_CHAR,MPI_COMM_WORLD);
    else { memcpy(d+r*m,s,m); MPI_Sendrecv(d+r*m,m,MPI_CHAR,p,2,d+p*m,m,MPI_CHAR,p,2,MPI_COMM_WORLD,MPI_STATUS_IGNORE);} }
   b[k]=(MPI_Wtime()-t)*1e6/it/(mode==0?2:1);} qsort(b,30,sizeof(double),cmp); best[mode]=b[2]; }
  if(r==0){printf("%8zu",m); for(int mode=0;mode<4;mode++) printf("  %s %8.2f",nm[mode],best[mode]); printf("\n");} }
 MPI_Finalize();}
