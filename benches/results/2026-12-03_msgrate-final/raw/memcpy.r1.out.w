# memcpybench: single thread, 7 trials of ~0.3 s
# Size          Best (GB/s)     Median (GB/s)
1048576x64      15.98           15.26
4194304x64      15.93           15.35
