// Which sanitizer a test binary is built with (tests/sanitize/run.sh), alike under gcc,
// which defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, and clang, which answers
// __has_feature instead. COLLIE_TEST_ASAN and COLLIE_TEST_TSAN are 1 or 0, for #if.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define COLLIE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COLLIE_TEST_ASAN 1
#endif
#endif
#ifndef COLLIE_TEST_ASAN
#define COLLIE_TEST_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define COLLIE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COLLIE_TEST_TSAN 1
#endif
#endif
#ifndef COLLIE_TEST_TSAN
#define COLLIE_TEST_TSAN 0
#endif
