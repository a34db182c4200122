# memcpybench: single thread, 7 trials of ~0.3 s
# Size          Best (GB/s)     Median (GB/s)
1048576x64      15.30           13.57
4194304x64      13.01           12.33
