# memcpybench: single thread, 7 trials of ~0.3 s
# Size          Best (GB/s)     Median (GB/s)
1048576x64      19.22           18.88
4194304x64      16.35           16.02
