# optimizer tests
