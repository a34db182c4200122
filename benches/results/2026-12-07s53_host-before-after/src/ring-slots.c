// SPSC ring, stamp-published records of REC bytes; consumer does WORK dummy iterations per record.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdatomic.h>
#define SIZE (1<<20)
static _Alignas(64) unsigned char ring[SIZE];
static _Alignas(64) _Atomic uint64_t head;
static int REC, WORK, WIN, FENCEON; static long N;
static _Atomic int ack;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *prod(void*a){pin(0);uint64_t tail=0;
  for(long i=0;i<N;i++){
    if(i%WIN==0 && i){ while(atomic_load_explicit(&ack,memory_order_acquire)< i/WIN) ; }
    while(tail+2*REC - atomic_load_explicit(&head,memory_order_acquire) > SIZE) ;
    unsigned char *p=ring+(tail&(SIZE-1));
    uint64_t nx=(tail+REC)&(SIZE-1);
    memset(p+4,(int)i,REC-4);
    atomic_store_explicit((_Atomic uint32_t*)(ring+nx),0,memory_order_relaxed);
    atomic_store_explicit((_Atomic uint32_t*)p,(uint32_t)(tail/REC)|0x80000000u,memory_order_release);
    if(FENCEON) atomic_thread_fence(memory_order_seq_cst);
    tail+=REC;}
  return 0;}
int main(int c,char**v){REC=atoi(v[1]);FENCEON=getenv("FENCE")!=0;WORK=atoi(v[2]);N=atol(v[3]);WIN=atoi(v[4]);
  pthread_t t;pin(1);double t0=now();pthread_create(&t,0,prod,0);
  uint64_t h=0;volatile uint64_t sink=0;
  for(long i=0;i<N;i++){
    uint32_t want=(uint32_t)(h/REC)|0x80000000u;
    while(atomic_load_explicit((_Atomic uint32_t*)(ring+(h&(SIZE-1))),memory_order_acquire)!=want) ;
    uint64_t x=ring[(h&(SIZE-1))+8];
    for(int k=0;k<WORK;k++) x=x*6364136223846793005ull+k;
    sink+=x; h+=REC; atomic_store_explicit(&head,h,memory_order_release);
    if((i+1)%WIN==0) atomic_store_explicit(&ack,(int)((i+1)/WIN),memory_order_release);
  }
  pthread_join(t,0);double dt=now()-t0;printf("rec %d work %d win %d: %.1f ns/record\n",REC,WORK,WIN,dt/N*1e9);return 0;}
