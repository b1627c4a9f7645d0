package fileperm

// modeBits: Windows decides who may read a file by its ACL, which the
// mode does not show (Go reports 0666, or 0444 for a read-only file). A
// key file Ratchet creates inherits its directory's ACL: under the user's
// profile, that user's and the administrators' alone. Checking the ACL
// itself is left undone; the docs say to keep data_dir in the profile.
const modeBits = false
