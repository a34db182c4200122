# memcpybench: single thread, 7 trials of ~0.3 s
# Size          Best (GB/s)     Median (GB/s)
1048576x64      15.38           14.11
4194304x64      13.76           12.97
