// Compiles tests/support/precompiled.h once for every test target (collie_test_pch).
