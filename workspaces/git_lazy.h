/*
 * git_lazy.h - libgit2, loaded on first use.
 *
 * libgit2 brings in thirteen shared libraries (itself, mbedTLS, libssh2,
 * http_parser, the Kerberos stack, ...) and 2,200 symbol relocations, about
 * 1 ms of CPU and 2 ms of wall time at every process start, and nothing reads
 * a repository before the gateway is ready. The gateway starts without it
 * and loads libgit2 with dlopen the first time a workspace's git is needed
 * (workspace_git_ready, workspace.h), as gateway/core/curl_lazy.h does for
 * libcurl. The API is libgit2's own: a file that includes this header with
 * GIT_LAZY_NAMES defined keeps calling git_repository_open_ext() and
 * friends, which become calls through the loaded table; they are valid only
 * once git_lazy_load succeeded (workspace_git_ready returned true). A
 * function missing from GIT_LAZY_FUNCTIONS fails the link: the gateway does
 * not link libgit2.
 */
#ifndef SB_WORKSPACES_GIT_LAZY_H
#define SB_WORKSPACES_GIT_LAZY_H

#include <git2.h>

/* Every function of libgit2 the gateway calls, once. */
#define GIT_LAZY_FUNCTIONS(X)                                                                      \
	X(git_blob_create_from_buffer)                                                             \
	X(git_blob_free)                                                                           \
	X(git_blob_is_binary)                                                                      \
	X(git_blob_lookup)                                                                         \
	X(git_blob_rawcontent)                                                                     \
	X(git_blob_rawsize)                                                                        \
	X(git_buf_dispose)                                                                         \
	X(git_commit_author)                                                                       \
	X(git_commit_create)                                                                       \
	X(git_commit_create_v)                                                                     \
	X(git_commit_free)                                                                         \
	X(git_commit_id)                                                                           \
	X(git_commit_lookup)                                                                       \
	X(git_commit_message)                                                                      \
	X(git_commit_parent)                                                                       \
	X(git_commit_parent_id)                                                                    \
	X(git_commit_parentcount)                                                                  \
	X(git_commit_summary)                                                                      \
	X(git_commit_time)                                                                         \
	X(git_commit_tree)                                                                         \
	X(git_diff_free)                                                                           \
	X(git_diff_get_delta)                                                                      \
	X(git_diff_num_deltas)                                                                     \
	X(git_diff_options_init)                                                                   \
	X(git_diff_tree_to_tree)                                                                   \
	X(git_diff_tree_to_workdir)                                                                \
	X(git_error_last)                                                                          \
	X(git_index_add_bypath)                                                                    \
	X(git_index_add_from_buffer)                                                               \
	X(git_index_free)                                                                          \
	X(git_index_read)                                                                          \
	X(git_index_remove_bypath)                                                                 \
	X(git_index_write)                                                                         \
	X(git_index_write_tree)                                                                    \
	X(git_libgit2_init)                                                                        \
	X(git_libgit2_opts)                                                                        \
	X(git_libgit2_shutdown)                                                                    \
	X(git_object_free)                                                                         \
	X(git_object_peel)                                                                         \
	X(git_odb_free)                                                                            \
	X(git_odb_hash)                                                                            \
	X(git_odb_read_header)                                                                     \
	X(git_oid_cmp)                                                                             \
	X(git_oid_cpy)                                                                             \
	X(git_oid_equal)                                                                           \
	X(git_oid_tostr)                                                                           \
	X(git_patch_free)                                                                          \
	X(git_patch_from_diff)                                                                     \
	X(git_patch_get_delta)                                                                     \
	X(git_patch_line_stats)                                                                    \
	X(git_patch_to_buf)                                                                        \
	X(git_reference_free)                                                                      \
	X(git_reference_lookup)                                                                    \
	X(git_reference_name_to_id)                                                                \
	X(git_reference_symbolic_target)                                                           \
	X(git_reference_target)                                                                    \
	X(git_reference_type)                                                                      \
	X(git_repository_free)                                                                     \
	X(git_repository_head)                                                                     \
	X(git_repository_index)                                                                    \
	X(git_repository_init)                                                                     \
	X(git_repository_is_bare)                                                                  \
	X(git_repository_odb)                                                                      \
	X(git_repository_open_ext)                                                                 \
	X(git_revparse_single)                                                                     \
	X(git_revwalk_free)                                                                        \
	X(git_revwalk_new)                                                                         \
	X(git_revwalk_next)                                                                        \
	X(git_revwalk_push_head)                                                                   \
	X(git_revwalk_sorting)                                                                     \
	X(git_signature_default)                                                                   \
	X(git_signature_free)                                                                      \
	X(git_signature_now)                                                                       \
	X(git_status_list_entrycount)                                                              \
	X(git_status_list_free)                                                                    \
	X(git_status_list_new)                                                                     \
	X(git_status_options_init)                                                                 \
	X(git_tree_create_updated)                                                                 \
	X(git_tree_entry_byname)                                                                   \
	X(git_tree_entry_bypath)                                                                   \
	X(git_tree_entry_free)                                                                     \
	X(git_tree_entry_id)                                                                       \
	X(git_tree_entry_name)                                                                     \
	X(git_tree_entry_type)                                                                     \
	X(git_tree_free)                                                                           \
	X(git_tree_id)                                                                             \
	X(git_tree_lookup)                                                                         \
	X(git_tree_walk)                                                                           \
	X(git_treebuilder_free)                                                                    \
	X(git_treebuilder_new)                                                                     \
	X(git_treebuilder_write)

/* The table: one pointer per function, named and typed as the function. */
struct git_lazy {
#define GIT_LAZY_FIELD(f) __typeof__(f) *f;
	GIT_LAZY_FUNCTIONS(GIT_LAZY_FIELD)
#undef GIT_LAZY_FIELD
};

/* The loaded table; NULL until git_lazy_load succeeded. Written once. */
extern const struct git_lazy *git_lazy_fns;

/* Loads libgit2 once (thread-safe; later calls return the first result).
 * It does not initialise the library (git_libgit2_init is the caller's).
 * Returns SB_OK, or SB_ERR_NOTFOUND with *why (static text) when the
 * library or one of its functions is missing. */
int git_lazy_load(const char **why);

#ifdef GIT_LAZY_NAMES
#define git_blob_create_from_buffer (git_lazy_fns->git_blob_create_from_buffer)
#define git_blob_free (git_lazy_fns->git_blob_free)
#define git_blob_is_binary (git_lazy_fns->git_blob_is_binary)
#define git_blob_lookup (git_lazy_fns->git_blob_lookup)
#define git_blob_rawcontent (git_lazy_fns->git_blob_rawcontent)
#define git_blob_rawsize (git_lazy_fns->git_blob_rawsize)
#define git_buf_dispose (git_lazy_fns->git_buf_dispose)
#define git_commit_author (git_lazy_fns->git_commit_author)
#define git_commit_create (git_lazy_fns->git_commit_create)
#define git_commit_create_v (git_lazy_fns->git_commit_create_v)
#define git_commit_free (git_lazy_fns->git_commit_free)
#define git_commit_id (git_lazy_fns->git_commit_id)
#define git_commit_lookup (git_lazy_fns->git_commit_lookup)
#define git_commit_message (git_lazy_fns->git_commit_message)
#define git_commit_parent (git_lazy_fns->git_commit_parent)
#define git_commit_parent_id (git_lazy_fns->git_commit_parent_id)
#define git_commit_parentcount (git_lazy_fns->git_commit_parentcount)
#define git_commit_summary (git_lazy_fns->git_commit_summary)
#define git_commit_time (git_lazy_fns->git_commit_time)
#define git_commit_tree (git_lazy_fns->git_commit_tree)
#define git_diff_free (git_lazy_fns->git_diff_free)
#define git_diff_get_delta (git_lazy_fns->git_diff_get_delta)
#define git_diff_num_deltas (git_lazy_fns->git_diff_num_deltas)
#define git_diff_options_init (git_lazy_fns->git_diff_options_init)
#define git_diff_tree_to_tree (git_lazy_fns->git_diff_tree_to_tree)
#define git_diff_tree_to_workdir (git_lazy_fns->git_diff_tree_to_workdir)
#define git_error_last (git_lazy_fns->git_error_last)
#define git_index_add_bypath (git_lazy_fns->git_index_add_bypath)
#define git_index_add_from_buffer (git_lazy_fns->git_index_add_from_buffer)
#define git_index_free (git_lazy_fns->git_index_free)
#define git_index_read (git_lazy_fns->git_index_read)
#define git_index_remove_bypath (git_lazy_fns->git_index_remove_bypath)
#define git_index_write (git_lazy_fns->git_index_write)
#define git_index_write_tree (git_lazy_fns->git_index_write_tree)
#define git_libgit2_init (git_lazy_fns->git_libgit2_init)
#define git_libgit2_opts (git_lazy_fns->git_libgit2_opts)
#define git_libgit2_shutdown (git_lazy_fns->git_libgit2_shutdown)
#define git_object_free (git_lazy_fns->git_object_free)
#define git_object_peel (git_lazy_fns->git_object_peel)
#define git_odb_free (git_lazy_fns->git_odb_free)
#define git_odb_hash (git_lazy_fns->git_odb_hash)
#define git_odb_read_header (git_lazy_fns->git_odb_read_header)
#define git_oid_cmp (git_lazy_fns->git_oid_cmp)
#define git_oid_cpy (git_lazy_fns->git_oid_cpy)
#define git_oid_equal (git_lazy_fns->git_oid_equal)
#define git_oid_tostr (git_lazy_fns->git_oid_tostr)
#define git_patch_free (git_lazy_fns->git_patch_free)
#define git_patch_from_diff (git_lazy_fns->git_patch_from_diff)
#define git_patch_get_delta (git_lazy_fns->git_patch_get_delta)
#define git_patch_line_stats (git_lazy_fns->git_patch_line_stats)
#define git_patch_to_buf (git_lazy_fns->git_patch_to_buf)
#define git_reference_free (git_lazy_fns->git_reference_free)
#define git_reference_lookup (git_lazy_fns->git_reference_lookup)
#define git_reference_name_to_id (git_lazy_fns->git_reference_name_to_id)
#define git_reference_symbolic_target (git_lazy_fns->git_reference_symbolic_target)
#define git_reference_target (git_lazy_fns->git_reference_target)
#define git_reference_type (git_lazy_fns->git_reference_type)
#define git_repository_free (git_lazy_fns->git_repository_free)
#define git_repository_head (git_lazy_fns->git_repository_head)
#define git_repository_index (git_lazy_fns->git_repository_index)
#define git_repository_init (git_lazy_fns->git_repository_init)
#define git_repository_is_bare (git_lazy_fns->git_repository_is_bare)
#define git_repository_odb (git_lazy_fns->git_repository_odb)
#define git_repository_open_ext (git_lazy_fns->git_repository_open_ext)
#define git_revparse_single (git_lazy_fns->git_revparse_single)
#define git_revwalk_free (git_lazy_fns->git_revwalk_free)
#define git_revwalk_new (git_lazy_fns->git_revwalk_new)
#define git_revwalk_next (git_lazy_fns->git_revwalk_next)
#define git_revwalk_push_head (git_lazy_fns->git_revwalk_push_head)
#define git_revwalk_sorting (git_lazy_fns->git_revwalk_sorting)
#define git_signature_default (git_lazy_fns->git_signature_default)
#define git_signature_free (git_lazy_fns->git_signature_free)
#define git_signature_now (git_lazy_fns->git_signature_now)
#define git_status_list_entrycount (git_lazy_fns->git_status_list_entrycount)
#define git_status_list_free (git_lazy_fns->git_status_list_free)
#define git_status_list_new (git_lazy_fns->git_status_list_new)
#define git_status_options_init (git_lazy_fns->git_status_options_init)
#define git_tree_create_updated (git_lazy_fns->git_tree_create_updated)
#define git_tree_entry_byname (git_lazy_fns->git_tree_entry_byname)
#define git_tree_entry_bypath (git_lazy_fns->git_tree_entry_bypath)
#define git_tree_entry_free (git_lazy_fns->git_tree_entry_free)
#define git_tree_entry_id (git_lazy_fns->git_tree_entry_id)
#define git_tree_entry_name (git_lazy_fns->git_tree_entry_name)
#define git_tree_entry_type (git_lazy_fns->git_tree_entry_type)
#define git_tree_free (git_lazy_fns->git_tree_free)
#define git_tree_id (git_lazy_fns->git_tree_id)
#define git_tree_lookup (git_lazy_fns->git_tree_lookup)
#define git_tree_walk (git_lazy_fns->git_tree_walk)
#define git_treebuilder_free (git_lazy_fns->git_treebuilder_free)
#define git_treebuilder_new (git_lazy_fns->git_treebuilder_new)
#define git_treebuilder_write (git_lazy_fns->git_treebuilder_write)
#endif

#endif
