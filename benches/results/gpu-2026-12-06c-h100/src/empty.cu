extern "C" __global__ void k(unsigned long long p) { }
