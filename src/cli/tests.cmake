# The `lode` command end to end against a real loded (see lode_cli_test.sh).
# CMAKE_CURRENT_LIST_DIR, not _SOURCE_DIR: right wherever this is include()d from.
if(TARGET lode AND TARGET loded)
	add_test(NAME lode_cli_test COMMAND ${CMAKE_CURRENT_LIST_DIR}/lode_cli_test.sh
		$<TARGET_FILE:loded> $<TARGET_FILE:lode>)
	set_tests_properties(lode_cli_test PROPERTIES TIMEOUT 300
		ENVIRONMENT "LODE_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp")
endif()
# The control-plane commands (admin.c) end to end: login, pools, tenants,
# users, groups, ACLs, cross-tenant refusals (see lode_admin_test.sh).
if(TARGET lode AND TARGET loded)
	add_test(NAME lode_admin_test COMMAND ${CMAKE_CURRENT_LIST_DIR}/lode_admin_test.sh
		$<TARGET_FILE:loded> $<TARGET_FILE:lode>)
	set_tests_properties(lode_admin_test PROPERTIES TIMEOUT 300
		ENVIRONMENT "LODE_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp")
endif()
