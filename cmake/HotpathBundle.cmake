# cmake -DAR=... -DRANLIB=... -DOUTPUT=... -DSCRIPT=<ar MRI script> -P HotpathBundle.cmake
# Merges static archives into one (the MRI script names them): ar -M, then an index.
file(REMOVE "${OUTPUT}")
execute_process(COMMAND "${AR}" -M INPUT_FILE "${SCRIPT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${AR} -M < ${SCRIPT} failed (${rc})")
endif()
execute_process(COMMAND "${RANLIB}" "${OUTPUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${RANLIB} ${OUTPUT} failed (${rc})")
endif()
