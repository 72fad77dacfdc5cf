# Build-time shortcut for llama-server, loaded by scripts/llama_setup.sh through
# -DCMAKE_PROJECT_llama.cpp_INCLUDE (runs at llama.cpp's project() call; the function runs once every target exists).
#
# The server-side C++ (HTTP, JSON, chat templates, argument parsing: the llama-common, server and mtmd targets) is
# half of the compile time and none of the compute: it is built at -O1 and, where it compiles so, as unity batches.
# The kernels (ggml) and the llama library keep llama.cpp's Release flags. Measured on 2 cores (llama.cpp of
# llama-cpp-python 0.3.36): 368 s -> 231 s, and the same seconds per reranked query (bench/rerank.py --server-bin).
function(_rerankeval_server_side_fast)
  foreach(t llama-common server-context llama-server-impl llama-server mtmd cpp-httplib)
    if(TARGET ${t})
      target_compile_options(${t} PRIVATE -O1)  # after CMAKE_CXX_FLAGS_RELEASE's -O3 on the command line: wins
    else()  # another llama.cpp version: still builds, only slower
      message(WARNING "llama_build.cmake: no target ${t} in this llama.cpp; it keeps the Release flags")
    endif()
  endforeach()
  foreach(t llama-common server-context llama-server-impl)
    if(TARGET ${t})
      set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    endif()
  endforeach()
  if(TARGET llama-common)  # a template specialisation after its use in another file of the batch
    set_source_files_properties(common/json.cpp TARGET_DIRECTORY llama-common PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _rerankeval_server_side_fast)
