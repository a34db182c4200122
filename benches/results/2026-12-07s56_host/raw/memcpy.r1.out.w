# memcpybench: single thread, 7 trials of ~0.3 s
# Size          Best (GB/s)     Median (GB/s)
1048576x64      13.89           13.63
4194304x64      13.97           13.67
