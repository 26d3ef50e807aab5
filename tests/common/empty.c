/* Keeps the test helper library non-empty before any helper exists. */
typedef int hc_testutil_empty_unit;
