#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
static volatile uint64_t sink;
#define SLOTS 1024
#define N 20000000L
typedef struct { _Alignas(64) volatile uint32_t stamp; uint8_t rest[60]; } line_t;
static line_t ring[SLOTS];
static _Alignas(64) volatile uint64_t head;
static _Alignas(64) atomic_int mtx; static _Alignas(64) atomic_int mtx2;
static int mode;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static void *cons(void *a){ pin(1); uint64_t h=0; uint64_t sum=0;
  while(h<N){ line_t *l=&ring[h%SLOTS]; uint32_t s; while((s=l->stamp)!=(uint32_t)(h|0x80000000u)) __builtin_ia32_pause();
    sum+=l->rest[10]; if(mode==2){int z=0; while(!atomic_compare_exchange_weak(&mtx2,&z,1)) z=0; atomic_exchange(&mtx2,0);} 
    h++; head=h; } return (void*)sum; }
int main(int c,char**v){ mode=atoi(v[1]); pthread_t t; pthread_create(&t,0,cons,0); pin(0);
  struct timespec a,b; clock_gettime(CLOCK_MONOTONIC,&a); uint64_t hc=0;
  for(uint64_t i=0;i<N;i++){ while(i-hc>=SLOTS-2){hc=head;}
    if(mode==1){int z=0; while(!atomic_compare_exchange_weak(&mtx,&z,1)) z=0;}
    line_t *l=&ring[i%SLOTS]; memset(l->rest,(int)i,60); __atomic_store_n(&l->stamp,(uint32_t)(i|0x80000000u),__ATOMIC_RELEASE);
    if(mode==1) atomic_exchange(&mtx,0); if(mode==3) __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if(mode==4){ volatile uint64_t buf[4] __attribute__((aligned(16))); buf[0]=i; buf[1]=i+1; __m128i v=_mm_load_si128((const __m128i*)buf); sink+=_mm_cvtsi128_si64(v);} 
  }
  pthread_join(t,0); clock_gettime(CLOCK_MONOTONIC,&b);
  printf("mode %d: %.1f ns/msg\n",mode,((b.tv_sec-a.tv_sec)*1e9+(b.tv_nsec-a.tv_nsec))/N); }
